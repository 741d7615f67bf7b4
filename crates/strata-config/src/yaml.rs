//! A minimal YAML node tree that remembers the source line of every node,
//! built from `saphyr-parser` events. Used both to read the configuration and
//! to find the line of a dotted key path (`devices[1].capacity`) when a
//! validation error is found after the document has been converted.

use saphyr_parser::{Event, Parser, ScalarStyle};
use std::collections::HashMap;

#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// 1-based source line.
    pub line: usize,
    pub value: Value,
}

#[derive(Clone, Debug)]
pub(crate) enum Value {
    Null,
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The text of a scalar node.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s) => Some(s),
            _ => None,
        }
    }

    /// Human description of the node's type, for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Null => "nothing".into(),
            Value::Scalar(s) => format!("{s:?}"),
            Value::Seq(_) => "a list".into(),
            Value::Map(_) => "a mapping".into(),
        }
    }

    /// Line of the deepest node present along a dotted key path such as
    /// `devices[1].capacity` or `adapter.include[0]`: the line of the key for
    /// a mapping entry, of the item for a list element. When the full path is
    /// absent (a default was used), the line of the nearest present ancestor.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut cur = self;
        let mut best = None;
        for seg in segments(path) {
            match (seg, &cur.value) {
                (Seg::Key(k), Value::Map(entries)) => {
                    match entries.iter().find(|(kn, _)| kn.as_str() == Some(k)) {
                        Some((kn, vn)) => {
                            best = Some(kn.line);
                            cur = vn;
                        }
                        None => break,
                    }
                }
                (Seg::Index(i), Value::Seq(items)) => match items.get(i) {
                    Some(n) => {
                        best = Some(n.line);
                        cur = n;
                    }
                    None => break,
                },
                _ => break,
            }
        }
        best
    }
}

enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn segments(path: &str) -> Vec<Seg<'_>> {
    let mut out = Vec::new();
    if path.is_empty() {
        return out;
    }
    for piece in path.split('.') {
        let mut parts = piece.split('[');
        if let Some(key) = parts.next() {
            if !key.is_empty() {
                out.push(Seg::Key(key));
            }
        }
        for idx in parts {
            match idx.trim_end_matches(']').parse() {
                Ok(i) => out.push(Seg::Index(i)),
                Err(_) => return out,
            }
        }
    }
    out
}

enum Frame {
    Seq {
        line: usize,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        line: usize,
        anchor: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// Parse a YAML text into its (single) document's root node; `Ok(None)` for
/// an empty document. Errors carry a 1-based line.
pub(crate) fn parse(text: &str) -> Result<Option<Node>, (usize, String)> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut documents = 0;

    fn push(
        stack: &mut [Frame],
        root: &mut Option<Node>,
        anchors: &mut HashMap<usize, Node>,
        node: Node,
        anchor: usize,
    ) {
        if anchor > 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => *root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                Some(k) => entries.push((k, node)),
                None => *key = Some(node),
            },
        }
    }

    while let Some(event) = parser.next_event() {
        let (event, span) = event.map_err(|e| (e.marker().line().max(1), e.info().to_string()))?;
        let line = span.start.line().max(1);
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err((
                        line,
                        "a configuration file must contain a single YAML document".into(),
                    ));
                }
            }
            Event::Scalar(text, style, anchor, _tag) => {
                let is_null = matches!(style, ScalarStyle::Plain)
                    && matches!(&*text, "" | "~" | "null" | "Null" | "NULL");
                let value = if is_null {
                    Value::Null
                } else {
                    Value::Scalar(text.into_owned())
                };
                push(
                    &mut stack,
                    &mut root,
                    &mut anchors,
                    Node { line, value },
                    anchor,
                );
            }
            Event::SequenceStart(anchor, _) => stack.push(Frame::Seq {
                line,
                anchor,
                items: Vec::new(),
            }),
            Event::MappingStart(anchor, _) => stack.push(Frame::Map {
                line,
                anchor,
                entries: Vec::new(),
                key: None,
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match stack.pop() {
                    Some(Frame::Seq {
                        line,
                        anchor,
                        items,
                    }) => (
                        Node {
                            line,
                            value: Value::Seq(items),
                        },
                        anchor,
                    ),
                    Some(Frame::Map {
                        line,
                        anchor,
                        entries,
                        ..
                    }) => (
                        Node {
                            line,
                            value: Value::Map(entries),
                        },
                        anchor,
                    ),
                    None => return Err((line, "unbalanced YAML structure".into())),
                };
                push(&mut stack, &mut root, &mut anchors, node, anchor);
            }
            Event::Alias(id) => {
                let node = anchors
                    .get(&id)
                    .cloned()
                    .ok_or((line, "alias to an unknown anchor".to_string()))?;
                let node = Node { line, ..node };
                push(&mut stack, &mut root, &mut anchors, node, 0);
            }
            _ => {}
        }
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_lookup() {
        let text = "a:\n  b: 1\nlist:\n  - x: 1\n    y: 2\n  - x: 3\nempty:\n";
        let root = parse(text).unwrap().unwrap();
        assert_eq!(root.line_of("a"), Some(1));
        assert_eq!(root.line_of("a.b"), Some(2));
        assert_eq!(root.line_of("list[1].x"), Some(6));
        assert_eq!(root.line_of("list[0].y"), Some(5));
        assert_eq!(root.line_of("list[1].zzz"), Some(6));
        assert_eq!(root.line_of("nope"), None);
        let Value::Map(entries) = &root.value else {
            panic!()
        };
        assert!(matches!(entries[2].1.value, Value::Null));
    }

    #[test]
    fn empty_and_errors() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
        let (line, _) = parse("a: 1\nb: [1, 2\n").unwrap_err();
        assert!(line >= 2);
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }

    #[test]
    fn anchors_and_quotes() {
        let root = parse("a: &x {k: v}\nb: *x\nc: 'null'\n").unwrap().unwrap();
        assert_eq!(root.line_of("b.k"), Some(1)); // alias keeps the anchor's children
        let Value::Map(entries) = &root.value else {
            panic!()
        };
        assert_eq!(entries[2].1.as_str(), Some("null"));
    }
}
