//! Slurm hostlist syntax: `node[01-04,07],gpu3,rack[1-2]-n[1-2]`.
//!
//! A list is items separated by commas outside brackets; an item is text
//! with any number of bracket groups, each a comma-separated list of
//! numbers and ranges (`lo-hi`, ascending). A range's numbers are printed
//! with at least as many digits as its lower bound (`[08-10]` → `08 09 10`),
//! as Slurm does. Several groups in one item give every combination, left
//! to right. Expansion is bounded by [`HOSTS_MAX`]; anything malformed is
//! an error naming the offending text, never a guess.

/// Hosts one list may expand to.
pub const HOSTS_MAX: usize = 65_536;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced '[' or ']' in {0:?}")]
    Brackets(String),
    #[error("bad range {range:?} in {item:?} (expected N or LO-HI with LO <= HI)")]
    Range { item: String, range: String },
    #[error("empty host name in {0:?}")]
    Empty(String),
    #[error("the list expands to more than {HOSTS_MAX} hosts")]
    TooMany,
}

/// Splits `list` at the commas outside brackets.
fn items(list: &str) -> Result<Vec<&str>, HostlistError> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let mut in_addr = false;
    for (i, c) in list.char_indices() {
        match c {
            // An address (after '=') may hold an IPv6 literal's brackets.
            '=' if depth == 0 => in_addr = true,
            ',' if depth == 0 => {
                in_addr = false;
                out.push(&list[start..i]);
                start = i + 1;
                continue;
            }
            _ if in_addr => continue,
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(HostlistError::Brackets(list.to_string()));
        }
    }
    if depth != 0 {
        return Err(HostlistError::Brackets(list.to_string()));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// The numbers of one bracket group (`01-04,07`), printed.
fn group(item: &str, body: &str) -> Result<Vec<String>, HostlistError> {
    let bad = |r: &str| HostlistError::Range {
        item: item.to_string(),
        range: r.to_string(),
    };
    let mut out = Vec::new();
    for r in body.split(',') {
        let r = r.trim();
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad(r));
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad(r))?,
            hi.parse().map_err(|_| bad(r))?,
        );
        if a > b {
            return Err(bad(r));
        }
        if (b - a) as usize >= HOSTS_MAX || out.len() + (b - a) as usize >= HOSTS_MAX {
            return Err(HostlistError::TooMany);
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Expands one item (`rack[1-2]-n[01-02]`) into its hosts.
fn expand_item(item: &str) -> Result<Vec<String>, HostlistError> {
    let mut hosts = vec![String::new()];
    let mut rest = item;
    // Bounded: every round consumes a bracket group or the tail.
    loop {
        let Some(open) = rest.find('[') else {
            for h in &mut hosts {
                h.push_str(rest);
            }
            break;
        };
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| HostlistError::Brackets(item.to_string()))?;
        let prefix = &rest[..open];
        let nums = group(item, &rest[open + 1..close])?;
        if hosts.len().saturating_mul(nums.len()) > HOSTS_MAX {
            return Err(HostlistError::TooMany);
        }
        let mut next = Vec::with_capacity(hosts.len() * nums.len());
        for h in &hosts {
            for n in &nums {
                next.push(format!("{h}{prefix}{n}"));
            }
        }
        hosts = next;
        rest = &rest[close + 1..];
    }
    Ok(hosts)
}

/// Expands a hostlist, keeping its order (duplicates are kept: the caller
/// decides what a repeated host means).
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for item in items(list.trim())? {
        let item = item.trim();
        if item.is_empty() {
            return Err(HostlistError::Empty(list.to_string()));
        }
        // `name=addr`: only the name is a pattern (an IPv6 address has brackets).
        let (pattern, addr) = match item.split_once('=') {
            Some((p, a)) => (p, Some(a)),
            None => (item, None),
        };
        let mut hosts = expand_item(pattern)?;
        if let Some(a) = addr {
            for h in &mut hosts {
                h.push('=');
                h.push_str(a);
            }
        }
        if out.len() + hosts.len() > HOSTS_MAX {
            return Err(HostlistError::TooMany);
        }
        out.extend(hosts);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn x(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn slurm_examples() {
        assert_eq!(
            x("node[01-04,07],gpu3"),
            ["node01", "node02", "node03", "node04", "node07", "gpu3"]
        );
        assert_eq!(x("n1"), ["n1"]);
        assert_eq!(x("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(x("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(
            x("rack[1-2]-n[1-2]"),
            ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
        );
        assert_eq!(x("a[1],b"), ["a1", "b"]);
        assert_eq!(x(" a , b "), ["a", "b"]);
        assert_eq!(x("node03=10.1.0.3,node04"), ["node03=10.1.0.3", "node04"]);
        assert_eq!(
            x("n[1-2].cluster.org"),
            ["n1.cluster.org", "n2.cluster.org"]
        );
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in [
            "n[1-2", "n1-2]", "n[[1]]", "n[a-b]", "n[3-1]", "n[]", "n[1,]", "a,,b", "", "n[1--2]",
        ] {
            assert!(expand(bad).is_err(), "{bad:?} accepted: {:?}", expand(bad));
        }
        assert_eq!(expand("n[0-9999999]"), Err(HostlistError::TooMany));
        assert_eq!(expand("a[0-999]b[0-999]"), Err(HostlistError::TooMany));
    }

    proptest! {
        /// A range printed back as a list of single hosts expands the same.
        #[test]
        fn ranges_equal_their_enumeration(lo in 0u32..500, n in 0u32..40, width in 1usize..5, prefix in "[a-z]{1,6}") {
            let hi = lo + n;
            let lo_s = format!("{lo:0width$}");
            let list = format!("{prefix}[{lo_s}-{hi}]");
            let singles: Vec<String> = (lo..=hi).map(|v| format!("{prefix}{v:0w$}", w = lo_s.len())).collect();
            prop_assert_eq!(expand(&list).unwrap(), singles.clone());
            prop_assert_eq!(expand(&singles.join(",")).unwrap(), singles);
        }

        #[test]
        fn never_panics(s in "[a-z0-9\\[\\],\\- ]{0,40}") {
            let _ = expand(&s);
        }
    }
}
