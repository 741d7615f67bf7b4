//! `FileList`: the buffered files directly inside a directory, so the
//! adapter can merge them into directory listings (a file created in the
//! buffer is not at the destination until flushed — never, in SCRATCH mode).

use strata_proto::{Errno, Result};

use crate::core::Core;

/// Names returned by one `FileList` answer at most (the arg area bounds it too).
pub const LIST_NAMES_MAX: usize = 4096;

impl Core {
    /// Sorted names (not paths) of files with a record whose parent is
    /// exactly `dir`, strictly after `after`; the bool says more follow.
    pub fn file_list(&self, dir: &str, after: &str, max: usize) -> Result<(Vec<String>, bool)> {
        if !dir.starts_with('/') {
            return Err(Errno::Inval);
        }
        let prefix = if dir.ends_with('/') {
            dir.to_string()
        } else {
            format!("{dir}/")
        };
        let mut names: Vec<&str> = Vec::new();
        // Bounded by the number of buckets (a metadata limit).
        for name in self.meta.bucket_names() {
            let Some(child) = name.strip_prefix(prefix.as_str()) else {
                continue;
            };
            if child.is_empty() || child.contains('/') || child <= after {
                continue;
            }
            if self.meta.file_by_path(name).is_some() {
                names.push(child);
            }
        }
        // further names of files (hard links); bounded like the buckets
        for name in self.files.links.by_name.keys() {
            let Some(child) = name.strip_prefix(prefix.as_str()) else {
                continue;
            };
            if !child.is_empty() && !child.contains('/') && child > after {
                names.push(child);
            }
        }
        names.sort_unstable();
        let more = names.len() > max;
        names.truncate(max);
        Ok((names.into_iter().map(str::to_string).collect(), more))
    }
}

#[cfg(test)]
mod tests {
    use crate::files::OpenArgs;
    use crate::testutil;
    use strata_proto::types::DestInfo;

    #[test]
    fn lists_direct_children_only_sorted_with_resume() {
        let mut fx = testutil::fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let a = OpenArgs {
            create: true,
            mode: 0o644,
            page_shift: 12,
            dest: Some(DestInfo::default()),
            ..OpenArgs::default()
        };
        for p in ["/d/b", "/d/a", "/d/sub/x", "/e/a", "/d/c"] {
            core.file_open(p, &a).unwrap();
        }
        core.meta
            .bucket_open("/d/not-a-file", true, false, 1)
            .unwrap();
        let (n, more) = core.file_list("/d", "", 10).unwrap();
        assert_eq!(n, vec!["a", "b", "c"]);
        assert!(!more);
        let (n, more) = core.file_list("/d/", "a", 1).unwrap();
        assert_eq!(n, vec!["b"]);
        assert!(more);
        assert_eq!(core.file_list("/d/sub", "", 10).unwrap().0, vec!["x"]);
        assert!(core.file_list("relative", "", 10).is_err());
    }

    #[test]
    fn a_directory_rename_moves_every_record_beneath_it_and_nothing_else() {
        let mut fx = testutil::fixture(64 << 20, 0, 0);
        let core = &mut fx.core;
        let a = OpenArgs {
            create: true,
            mode: 0o644,
            page_shift: 12,
            dest: Some(DestInfo::default()),
            ..OpenArgs::default()
        };
        for p in ["/d/a", "/d/sub/x", "/d/sub/deep/y", "/dx/keep", "/e/a"] {
            core.file_open(p, &a).unwrap();
        }
        assert_eq!(core.file_rename_tree("/d", "/n/m", true).unwrap(), 3);
        for p in [
            "/n/m/a",
            "/n/m/sub/x",
            "/n/m/sub/deep/y",
            "/dx/keep",
            "/e/a",
        ] {
            assert!(core.meta.file_by_path(p).is_some(), "{p}");
        }
        for p in ["/d/a", "/d/sub/x", "/d/sub/deep/y"] {
            assert!(core.meta.file_by_path(p).is_none(), "{p}");
        }
        assert_eq!(core.file_list("/n/m/sub", "", 10).unwrap().0, vec!["x"]);
        // Into its own subtree: refused, nothing moved.
        assert!(core.file_rename_tree("/n", "/n/m/z", true).is_err());
        assert!(core.meta.file_by_path("/n/m/a").is_some());
        core.file_check().unwrap();
    }
}
