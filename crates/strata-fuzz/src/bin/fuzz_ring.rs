//! Fuzz target `ring` (see the crate docs). With `--features afl` it runs
//! under AFL++; without, it runs once on the file named as its argument (or
//! stdin): how a crash found by the fuzzer is replayed.

#[cfg(feature = "afl")]
fn main() {
    afl::fuzz!(|data: &[u8]| {
        strata_fuzz::ring(data);
    });
}

#[cfg(not(feature = "afl"))]
fn main() {
    use std::io::Read;
    let mut data = Vec::new();
    match std::env::args_os().nth(1) {
        Some(p) => data = std::fs::read(p).expect("read the input file"),
        None => {
            std::io::stdin().read_to_end(&mut data).expect("read stdin");
        }
    }
    strata_fuzz::ring(&data);
}
