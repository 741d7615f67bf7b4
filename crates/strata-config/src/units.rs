//! Human units: sizes, durations and bandwidths.
//!
//! Size units (case-insensitive):
//! * `B` or no unit: bytes;
//! * `K`, `Ki`, `KiB`, `M`, `Mi`, `MiB`, `G`, `Gi`, `GiB`, `T`, `Ti`, `TiB`, `P`, `Pi`, `PiB`,
//!   `E`, `Ei`, `EiB`: **1024-based**;
//! * `KB`, `MB`, `GB`, `TB`, `PB`, `EB`: **1000-based** (SI, like disk vendors).
//!
//! A fractional number is allowed (`1.5GiB`); a result that is not a whole
//! number of bytes is rounded down.

const KIB: u128 = 1 << 10;

/// Multiplier of a size unit, or `None` for an unknown unit.
fn size_unit(unit: &str) -> Option<u128> {
    let u = unit.to_ascii_lowercase();
    Some(match u.as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => KIB,
        "m" | "mi" | "mib" => KIB.pow(2),
        "g" | "gi" | "gib" => KIB.pow(3),
        "t" | "ti" | "tib" => KIB.pow(4),
        "p" | "pi" | "pib" => KIB.pow(5),
        "e" | "ei" | "eib" => KIB.pow(6),
        "kb" => 1000,
        "mb" => 1000u128.pow(2),
        "gb" => 1000u128.pow(3),
        "tb" => 1000u128.pow(4),
        "pb" => 1000u128.pow(5),
        "eb" => 1000u128.pow(6),
        _ => return None,
    })
}

/// Split `"1.5 GiB"` into the number part `"1.5"` and the unit `"GiB"`.
/// The number must be digits with at most one `.` and at least one digit.
fn split_number(s: &str) -> Option<(&str, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    if num.is_empty() || !num.bytes().any(|b| b.is_ascii_digit()) || num.matches('.').count() > 1 {
        return None;
    }
    Some((num, unit.trim()))
}

const SIZE_HINT: &str = "expected a number with a unit such as 512MiB or 4GiB";

/// Parse a size such as `4GiB`, `512MiB`, `64KiB`, `1.5GiB`, `4096`, `4096B`,
/// `4G` (= 4GiB) or `4GB` (= 4·10⁹ bytes). See the module docs for the units.
///
/// Rejects empty input, negative numbers, unknown units and values that do
/// not fit in a `u64`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("invalid size {s:?}: empty ({SIZE_HINT})"));
    }
    if t.starts_with('-') {
        return Err(format!("invalid size {s:?}: sizes cannot be negative"));
    }
    let bad = || format!("invalid size {s:?} ({SIZE_HINT})");
    let (num, unit) = split_number(t).ok_or_else(bad)?;
    let mult = size_unit(unit).ok_or_else(bad)?;
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let too_large = || format!("size {s:?} is too large (at most {} bytes)", u64::MAX);
    let int: u128 = if int_part.is_empty() {
        0
    } else {
        if int_part.trim_start_matches('0').len() > 25 {
            return Err(too_large());
        }
        int_part.parse().map_err(|_| bad())?
    };
    // Fraction: keep at most 18 digits (more cannot change the byte count of a u64).
    let frac_digits = &frac_part[..frac_part.len().min(18)];
    let frac_val: u128 = if frac_digits.is_empty() {
        0
    } else {
        frac_digits.parse().map_err(|_| bad())?
    };
    let frac_bytes = frac_val * mult / 10u128.pow(frac_digits.len() as u32);
    let total = int
        .checked_mul(mult)
        .and_then(|v| v.checked_add(frac_bytes))
        .ok_or_else(too_large)?;
    u64::try_from(total).map_err(|_| too_large())
}

/// Trim a fixed-point decimal rendering: `"1.500"` → `"1.5"`, `"2.000"` → `"2"`.
fn trim_decimal(mut s: String) -> String {
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    s
}

/// Format a byte count with the largest binary unit that represents it
/// exactly with at most three decimals: `4GiB`, `1.5GiB`, `512MiB`, `100B`.
/// The result always parses back to the same number with [`parse_size`].
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 6] = [
        ("EiB", 60),
        ("PiB", 50),
        ("TiB", 40),
        ("GiB", 30),
        ("MiB", 20),
        ("KiB", 10),
    ];
    for (name, shift) in UNITS {
        let unit = 1u64 << shift;
        if bytes < unit {
            continue;
        }
        for decimals in 0..=3 {
            let v = bytes as f64 / unit as f64;
            let s = format!("{}{name}", trim_decimal(format!("{v:.decimals$}")));
            if parse_size(&s) == Ok(bytes) {
                return s;
            }
        }
    }
    format!("{bytes}B")
}

const DURATION_HINT: &str = "expected a number with a unit such as 50us, 2ms or 1s";

/// Parse a duration such as `100us`, `2ms`, `1s`, `50ns`, `1.5min`, `1h` into
/// microseconds. Units: `ns`, `us` (also `µs`), `ms`, `s`, `min`, `h`. A bare
/// `0` is accepted; any other number needs a unit.
pub fn parse_duration_us(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!(
            "invalid duration {s:?}: durations cannot be negative"
        ));
    }
    let bad = || format!("invalid duration {s:?} ({DURATION_HINT})");
    let (num, unit) = split_number(t).ok_or_else(bad)?;
    let v: f64 = num.parse().map_err(|_| bad())?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" if v == 0.0 => 0.0,
        "ns" => 1e-3,
        "us" | "µs" | "μs" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "min" => 60e6,
        "h" => 3600e6,
        _ => return Err(bad()),
    };
    let us = v * mult;
    if !us.is_finite() {
        return Err(format!("duration {s:?} is too large"));
    }
    Ok(us)
}

/// Format microseconds with the largest unit that represents the value with
/// at most three decimals (`1s`, `100ms`, `50us`, `1.5ms`). The result always
/// parses back to the same value with [`parse_duration_us`].
pub fn format_duration_us(us: f64) -> String {
    if us == 0.0 {
        return "0s".into();
    }
    const UNITS: [(&str, f64); 6] = [
        ("h", 3600e6),
        ("min", 60e6),
        ("s", 1e6),
        ("ms", 1e3),
        ("us", 1.0),
        ("ns", 1e-3),
    ];
    for (name, mult) in UNITS {
        let v = us / mult;
        if v < 1.0 {
            continue;
        }
        for decimals in 0..=3 {
            let s = format!("{}{name}", trim_decimal(format!("{v:.decimals$}")));
            if parse_duration_us(&s) == Ok(us) {
                return s;
            }
        }
    }
    // Shortest exact representation of the f64; always round-trips.
    format!("{us}us")
}

const BANDWIDTH_HINT: &str = "expected a size per second such as 500MiB/s or 6GiB/s";

/// Parse a bandwidth such as `6GiB/s`, `500MiB/s` or `190MB/s` into MiB/s.
/// The size part uses the units of [`parse_size`]; `0` alone means zero.
pub fn parse_bandwidth_mib_s(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!(
            "invalid bandwidth {s:?}: bandwidths cannot be negative"
        ));
    }
    let bad = || format!("invalid bandwidth {s:?} ({BANDWIDTH_HINT})");
    if t == "0" {
        return Ok(0.0);
    }
    let (size, per) = t.split_once('/').ok_or_else(bad)?;
    if !matches!(per.trim().to_ascii_lowercase().as_str(), "s" | "sec") {
        return Err(bad());
    }
    let (num, unit) = split_number(size.trim()).ok_or_else(bad)?;
    let v: f64 = num.parse().map_err(|_| bad())?;
    let mult = size_unit(unit).ok_or_else(bad)? as f64;
    let mib_s = v * mult / (1u64 << 20) as f64;
    if !mib_s.is_finite() {
        return Err(format!("bandwidth {s:?} is too large"));
    }
    Ok(mib_s)
}

/// Format a bandwidth in MiB/s with a human unit (`8GiB/s`, `500MiB/s`,
/// `190MB/s`). The result always parses back to the same value with
/// [`parse_bandwidth_mib_s`].
pub fn format_bandwidth_mib_s(mib_s: f64) -> String {
    if mib_s == 0.0 {
        return "0".into();
    }
    // Large binary units first, then large decimal ones (so that 190MB/s
    // stays 190MB/s rather than 185546.875KiB/s), then the small units.
    const UNITS: [&str; 9] = ["TiB", "GiB", "MiB", "TB", "GB", "MB", "KiB", "KB", "B"];
    for name in UNITS {
        let mult = size_unit(name).unwrap() as f64;
        let v = mib_s * (1u64 << 20) as f64 / mult;
        if v < 1.0 {
            continue;
        }
        for decimals in 0..=3 {
            let s = format!("{}{name}/s", trim_decimal(format!("{v:.decimals$}")));
            if parse_bandwidth_mib_s(&s) == Ok(mib_s) {
                return s;
            }
        }
    }
    format!("{mib_s}MiB/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KI: u64 = 1024;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4GiB"), Ok(4 * KI * KI * KI));
        assert_eq!(parse_size("512MiB"), Ok(512 * KI * KI));
        assert_eq!(parse_size("64KiB"), Ok(64 * KI));
        assert_eq!(parse_size("1.5GiB"), Ok(3 * KI * KI * KI / 2));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("4G"), Ok(4 * KI * KI * KI));
        assert_eq!(parse_size("4GB"), Ok(4_000_000_000));
        assert_eq!(parse_size("4gib"), Ok(4 * KI * KI * KI));
        assert_eq!(parse_size("4 MiB"), Ok(4 * KI * KI));
        assert_eq!(parse_size(" 8kb "), Ok(8000));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(".5KiB"), Ok(512));
        assert_eq!(parse_size("1.1B"), Ok(1)); // rounded down
        assert_eq!(parse_size("15EiB"), Ok(15 << 60));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn bad_sizes() {
        for bad in [
            "", "  ", "-4GiB", "4GB2", "GiB", "4XB", "1.2.3MiB", "abc", "4 G i B", ".", "1e9", "+5",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_size("16EiB").unwrap_err().contains("too large"));
        assert!(parse_size("18446744073709551616")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("99999999999999999999999999999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(
            parse_size("4GB2").unwrap_err(),
            "invalid size \"4GB2\" (expected a number with a unit such as 512MiB or 4GiB)"
        );
        assert!(parse_size("-1").unwrap_err().contains("negative"));
    }

    #[test]
    fn size_formatting_round_trips() {
        assert_eq!(format_size(4 * KI * KI * KI), "4GiB");
        assert_eq!(format_size(3 * KI * KI * KI / 2), "1.5GiB");
        assert_eq!(format_size(512 * KI * KI), "512MiB");
        assert_eq!(format_size(100), "100B");
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(64), "64B");
        assert_eq!(format_size(4096), "4KiB");
        for v in [
            1,
            1023,
            1025,
            4_000_000_000,
            123_456_789,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            3 << 40,
        ] {
            assert_eq!(
                parse_size(&format_size(v)),
                Ok(v),
                "{v} -> {}",
                format_size(v)
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_us("100us"), Ok(100.0));
        assert_eq!(parse_duration_us("2ms"), Ok(2000.0));
        assert_eq!(parse_duration_us("1s"), Ok(1e6));
        assert_eq!(parse_duration_us("50ns"), Ok(0.05));
        assert_eq!(parse_duration_us("1.5ms"), Ok(1500.0));
        assert_eq!(parse_duration_us("2min"), Ok(120e6));
        assert_eq!(parse_duration_us("1h"), Ok(3600e6));
        assert_eq!(parse_duration_us("0"), Ok(0.0));
        assert_eq!(parse_duration_us("3 MS"), Ok(3000.0));
        assert_eq!(parse_duration_us("5µs"), Ok(5.0));
        for bad in [
            "",
            "5",
            "-1ms",
            "1m",
            "ms",
            "1.2.3s",
            "1 fortnight",
            "inf",
            "NaN",
        ] {
            assert!(
                parse_duration_us(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        for (us, s) in [
            (1e6, "1s"),
            (100e3, "100ms"),
            (50.0, "50us"),
            (1500.0, "1.5ms"),
            (0.05, "50ns"),
            (0.0, "0s"),
        ] {
            assert_eq!(format_duration_us(us), s);
        }
        for us in [1.0 / 3.0, 123456.789, 1e-9, 7.25e9, 0.1 + 0.2] {
            assert_eq!(parse_duration_us(&format_duration_us(us)), Ok(us), "{us}");
        }
    }

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth_mib_s("6GiB/s"), Ok(6144.0));
        assert_eq!(parse_bandwidth_mib_s("500MiB/s"), Ok(500.0));
        assert_eq!(parse_bandwidth_mib_s("190MB/s"), Ok(190e6 / 1048576.0));
        assert_eq!(parse_bandwidth_mib_s("1.5 GiB / s"), Ok(1536.0));
        assert_eq!(parse_bandwidth_mib_s("0"), Ok(0.0));
        for bad in ["", "6GiB", "6GiB/h", "/s", "-1MiB/s", "6XiB/s", "fast"] {
            assert!(
                parse_bandwidth_mib_s(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(format_bandwidth_mib_s(6144.0), "6GiB/s");
        assert_eq!(format_bandwidth_mib_s(500.0), "500MiB/s");
        assert_eq!(format_bandwidth_mib_s(190e6 / 1048576.0), "190MB/s");
        assert_eq!(format_bandwidth_mib_s(0.0), "0");
        for v in [1.0 / 3.0, 0.001, 8192.0, 12345.678, 1e-12] {
            assert_eq!(
                parse_bandwidth_mib_s(&format_bandwidth_mib_s(v)),
                Ok(v),
                "{v}"
            );
        }
    }
}
