//! `STRATA_*` environment overrides. See [`Config::apply_env`] for the rules.

use crate::read::{
    parse_path, set_device_field, set_scalar, DEVICE_FIELDS, LIST_KEYS, SCALAR_KEYS,
};
use crate::*;
use std::collections::HashMap;

const PREFIX: &str = "STRATA_";

/// Short names for frequently used keys.
const ALIASES: &[(&str, &str)] = &[
    ("STRATA_SOCKET", "daemon.socket"),
    ("STRATA_LOG", "daemon.log"),
    ("STRATA_MODE", "adapter.mode"),
    ("STRATA_INCLUDE", "adapter.include"),
    ("STRATA_EXCLUDE", "adapter.exclude"),
];

/// `STRATA_*` variables that are not configuration keys.
/// `STRATA_PRELOAD_LIB`: the adapter library `strata run` preloads (plan3.md).
/// `STRATA_BIN`: the `strata` executable `strata-bench` starts daemons with.
const NOT_CONFIG_EXACT: &[&str] = &["STRATA_CONFIG", "STRATA_PRELOAD_LIB", "STRATA_BIN"];
const NOT_CONFIG_PREFIXES: &[&str] = &["STRATA_CLIENT_", "STRATA_INTERNAL_", "STRATA_RUN_"];

/// Environment variable of a dotted key path.
pub(crate) fn env_name(path: &str) -> String {
    format!("{PREFIX}{}", path.replace('.', "_").to_ascii_uppercase())
}

/// Name part of a device's variables: `fast-nvme` → `FAST_NVME`.
fn device_env_name(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

fn device_var(dev: &str, field: &str) -> String {
    format!(
        "{PREFIX}DEVICE_{}_{}",
        device_env_name(dev),
        field.to_ascii_uppercase()
    )
}

/// What a variable sets.
enum Target {
    Scalar(&'static str),
    List(&'static str),
    Device(usize, &'static str),
}

impl Target {
    /// Dotted YAML key the target corresponds to.
    fn key(&self) -> String {
        match self {
            Target::Scalar(k) | Target::List(k) => k.to_string(),
            Target::Device(i, f) => format!("devices[{i}].{f}"),
        }
    }
}

pub(crate) fn known_names(cfg: &Config) -> Vec<String> {
    let mut names: Vec<String> = SCALAR_KEYS
        .iter()
        .chain(LIST_KEYS)
        .map(|k| env_name(k))
        .collect();
    names.extend(ALIASES.iter().map(|(a, _)| a.to_string()));
    for d in &cfg.devices {
        names.extend(DEVICE_FIELDS.iter().map(|f| device_var(&d.name, f)));
    }
    names
}

fn env_err(var: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        origin: ENV_ORIGIN.into(),
        key: var.into(),
        line: None,
        message: message.into(),
    }
}

/// `Ok(None)`: not configuration (allow-listed). `Err`: unknown variable.
fn resolve(cfg: &Config, var: &str) -> Result<Option<Target>, ConfigError> {
    if NOT_CONFIG_EXACT.contains(&var) || NOT_CONFIG_PREFIXES.iter().any(|p| var.starts_with(p)) {
        return Ok(None);
    }
    let alias = ALIASES.iter().find(|(a, _)| *a == var).map(|(_, k)| *k);
    if let Some(k) = alias.or_else(|| {
        SCALAR_KEYS
            .iter()
            .chain(LIST_KEYS)
            .copied()
            .find(|k| env_name(k) == var)
    }) {
        return Ok(Some(if LIST_KEYS.contains(&k) {
            Target::List(k)
        } else {
            Target::Scalar(k)
        }));
    }
    if let Some(rest) = var.strip_prefix("STRATA_DEVICE_") {
        for field in DEVICE_FIELDS {
            let suffix = format!("_{}", field.to_ascii_uppercase());
            if let Some(dev_name) = rest.strip_suffix(&suffix) {
                return match cfg
                    .devices
                    .iter()
                    .position(|d| device_env_name(&d.name) == dev_name)
                {
                    Some(i) => Ok(Some(Target::Device(i, field))),
                    None => {
                        let names: Vec<&str> =
                            cfg.devices.iter().map(|d| d.name.as_str()).collect();
                        Err(env_err(
                            var,
                            format!(
                                "no device named {:?} (configured devices: {})",
                                dev_name.to_ascii_lowercase(),
                                names.join(", ")
                            ),
                        ))
                    }
                };
            }
        }
    }
    let mut msg = "unknown strata environment variable".to_string();
    if let Some(s) = closest(var, known_names(cfg).iter().map(String::as_str)) {
        msg.push_str(&format!(" (did you mean {s}?)"));
    }
    Err(env_err(var, msg))
}

/// A path of `STRATA_INCLUDE`/`STRATA_EXCLUDE`: relative ones are taken
/// from the current directory, as `strata run --include rel` takes them
/// (issue 12, item 17: one was accepted, the other refused).
fn parse_path_from_cwd(s: &str) -> Result<std::path::PathBuf, String> {
    let p = parse_path(s)?;
    if p.is_absolute() {
        return Ok(p);
    }
    let cwd = std::env::current_dir()
        .map_err(|e| format!("relative path {s:?} and no current directory ({e})"))?;
    Ok(cwd.join(p))
}

pub(crate) fn apply_env(
    cfg: &mut Config,
    vars: impl Iterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let mut vars: Vec<(String, String)> = vars.filter(|(k, _)| k.starts_with(PREFIX)).collect();
    // Aliases first so that the full names win; otherwise sorted, for determinism.
    vars.sort_by(|a, b| {
        let alias = |k: &str| ALIASES.iter().any(|(x, _)| *x == k);
        (!alias(&a.0), &a.0).cmp(&(!alias(&b.0), &b.0))
    });
    let mut next = cfg.clone();
    let mut set_by: HashMap<String, String> = HashMap::new();
    for (var, value) in &vars {
        let Some(target) = resolve(&next, var)? else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        let key = target.key();
        let result = match &target {
            Target::Scalar(k) => set_scalar(&mut next, k, value),
            Target::List(k) => value
                .split(':')
                .filter(|s| !s.trim().is_empty())
                .map(parse_path_from_cwd)
                .collect::<Result<Vec<_>, _>>()
                .map(|list| match *k {
                    "adapter.include" => next.adapter.include = list,
                    _ => next.adapter.exclude = list,
                }),
            Target::Device(i, f) => set_device_field(&mut next.devices[*i], f, value),
        };
        result.map_err(|m| env_err(var, format!("{m} (sets {key})")))?;
        set_by.insert(key, var.clone());
    }
    next.validate().map_err(|mut e| {
        let base = e.key.split('[').next().unwrap_or("").to_string();
        let var = set_by.get(&e.key).or_else(|| set_by.get(&base));
        if let Some(var) = var {
            e.message = format!("{}: {}", e.key, e.message);
            e.key = var.clone();
            e.origin = ENV_ORIGIN.into();
        } else if !set_by.is_empty() {
            let mut vars: Vec<&String> = set_by.values().collect();
            vars.sort();
            let list: Vec<&str> = vars.iter().map(|s| s.as_str()).collect();
            e.message = format!(
                "{} (after environment overrides {})",
                e.message,
                list.join(", ")
            );
        }
        e
    })?;
    *cfg = next;
    Ok(())
}

/// Edit distance between two strings (case-insensitive).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_ascii_lowercase().chars().collect();
    let b: Vec<char> = b.to_ascii_lowercase().chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate closest to `word`, if close enough to be a plausible typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.len() / 4).clamp(1, 3);
    candidates
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
