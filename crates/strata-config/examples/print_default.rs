//! Print the machine-derived default configuration as YAML.
fn main() {
    match strata_config::Config::load_effective(
        std::env::args_os()
            .nth(1)
            .as_deref()
            .map(std::path::Path::new),
    ) {
        Ok(cfg) => print!("{}", cfg.to_yaml()),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
