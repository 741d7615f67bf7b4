//! `strata ls BUCKET --long | --json`: one row per blob with where it lives
//! and how the organizer sees it.

use anyhow::Result;
use strata_client::{BlobInfo, Bucket};

use crate::table::Table;

/// Names of the tiers whose bit is set in `mask`.
fn tiers_of(tiers: &[String], mask: u32) -> Vec<&str> {
    tiers
        .iter()
        .enumerate()
        .filter(|(k, _)| mask & (1 << k) != 0)
        .map(|(_, n)| n.as_str())
        .collect()
}

fn yes_no(v: bool) -> String {
    if v {
        "yes".into()
    } else {
        "no".into()
    }
}

/// One table row (text) for a blob.
fn row(name: &str, i: &BlobInfo, tiers: &[String]) -> Vec<String> {
    let on = tiers_of(tiers, i.tier_mask);
    vec![
        name.to_string(),
        i.size.to_string(),
        if on.is_empty() {
            "-".into()
        } else {
            on.join(",")
        },
        format!("{:.3}", i.score),
        i.user_score.map_or("-".into(), |u| format!("{u:.3}")),
        yes_no(i.stationary),
        yes_no(i.dirty),
        i.access_count.to_string(),
    ]
}

/// The blobs of `b` as a table (`--long`) or JSON (`--json`).
pub fn blobs(b: &Bucket, names: &[String], tiers: &[String], json: bool) -> Result<String> {
    let mut t = Table::new(&[
        "BLOB",
        "SIZE",
        "TIERS",
        "SCORE",
        "USER",
        "STATIONARY",
        "DIRTY",
        "ACCESSES",
    ]);
    let mut rows = Vec::new();
    for n in names {
        let i = b.stat(n)?;
        if json {
            rows.push(serde_json::json!({
                "blob": n, "size": i.size, "tiers": tiers_of(tiers, i.tier_mask), "score": i.score,
                "user_score": i.user_score, "stationary": i.stationary, "dirty": i.dirty, "accesses": i.access_count,
            }));
        } else {
            t.row(row(n, &i, tiers));
        }
    }
    Ok(if json {
        format!("{}\n", serde_json::to_string_pretty(&rows)?)
    } else {
        t.render()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_shows_tiers_and_user_wishes() {
        let tiers = vec!["ram".to_string(), "disk0".to_string()];
        let i = BlobInfo {
            size: 3 << 20,
            access_count: 7,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            score: 0.71234,
            user_score: Some(0.9),
            stationary: true,
            extent_count: 2,
            tier_mask: 0b11,
            dirty: false,
        };
        assert_eq!(
            row("b", &i, &tiers),
            vec![
                "b",
                "3145728",
                "ram,disk0",
                "0.712",
                "0.900",
                "yes",
                "no",
                "7"
            ]
        );
        let j = BlobInfo {
            user_score: None,
            stationary: false,
            tier_mask: 0,
            dirty: true,
            ..i
        };
        assert_eq!(row("e", &j, &tiers)[2..7], ["-", "0.712", "-", "no", "yes"]);
    }
}
