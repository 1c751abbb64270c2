//! A YAML tree with positions, read from saphyr-parser's events, aliases and depth bounded.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};

#[derive(Debug, Clone)]
pub(super) enum Yaml {
    Scalar { text: String, plain: bool },
    List(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) at: (usize, usize),
    pub(super) yaml: Yaml,
}

fn position(span: &Span) -> (usize, usize) {
    (span.start.line(), span.start.col() + 1)
}

/// The most nodes (scalars, lists and maps) aliases may copy in one file. Without a bound,
/// a few hundred bytes of nested aliases ("billion laughs") ask for a billion nodes; a file's
/// own nodes are bounded by its length. 200,000 nodes take about 25 MB, and are twenty
/// times what a 10,000-descriptor file sharing its `rate_limit` blocks by alias copies.
pub(super) const MAX_COPIED_NODES: usize = 200_000;

/// The most scalar text, in bytes, that aliases may copy in one file.
pub(super) const MAX_COPIED_TEXT: usize = 16 << 20;

/// The deepest a file may nest lists and maps, aliases counted at their full depth: a
/// descriptor tree takes two levels a level, and the reader and validator recurse once a
/// level, so this bounds their stack too.
pub(super) const MAX_DEPTH: usize = 64;

/// The first document of `text`, `None` when there is none.
///
/// # Errors
///
/// The parser's, and a file beyond [`MAX_COPIED_NODES`], [`MAX_COPIED_TEXT`] or [`MAX_DEPTH`],
/// located at the alias or collection that crossed the bound.
pub(super) fn read_yaml(text: &str) -> Result<Option<Node>, ScanError> {
    let mut reader = Reader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        nodes: 0,
        text: 0,
        copied_nodes: 0,
        copied_text: 0,
    };
    loop {
        let (event, span) = reader.next()?;
        match event {
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => {}
            Event::StreamEnd => return Ok(None),
            event => return reader.node(event, span, 1).map(|(node, _)| Some(node)),
        }
    }
}

/// An anchored node, with what copying it costs.
struct Anchored {
    node: Node,
    nodes: usize,
    text: usize,
    height: usize,
}

struct Reader<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    anchors: HashMap<usize, Anchored>,
    /// Nodes produced so far, copies included (what an anchor costs to copy is the
    /// difference across it).
    nodes: usize,
    /// Scalar bytes produced so far, copies included.
    text: usize,
    /// Nodes copied by aliases so far.
    copied_nodes: usize,
    /// Scalar bytes copied by aliases so far.
    copied_text: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), ScanError> {
        match self.parser.next_event() {
            Some(event) => event,
            None => Err(ScanError::new_str(
                saphyr_parser::Marker::default(),
                "unexpected end of input",
            )),
        }
    }

    /// Counts a node of the file's own, with `text` bytes.
    fn own(&mut self, text: usize) {
        self.nodes = self.nodes.saturating_add(1);
        self.text = self.text.saturating_add(text);
    }

    /// Counts `nodes` and `text` copied by the alias at `span`, refusing to pass the bounds.
    fn copy(&mut self, span: &Span, nodes: usize, text: usize) -> Result<(), ScanError> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.text = self.text.saturating_add(text);
        self.copied_nodes = self.copied_nodes.saturating_add(nodes);
        self.copied_text = self.copied_text.saturating_add(text);
        if self.copied_nodes > MAX_COPIED_NODES {
            return Err(ScanError::new(
                span.start,
                format!("aliases copy more than {MAX_COPIED_NODES} nodes, the most they may (an alias counts as the nodes it copies)"),
            ));
        }
        if self.copied_text > MAX_COPIED_TEXT {
            return Err(ScanError::new(
                span.start,
                format!(
                    "aliases copy more than {} MiB of text, the most they may",
                    MAX_COPIED_TEXT >> 20
                ),
            ));
        }
        Ok(())
    }

    /// The node that starts with `event` at `depth` (the document's root is at 1), with its
    /// height (0 for a scalar).
    fn node(
        &mut self,
        event: Event<'a>,
        span: Span,
        depth: usize,
    ) -> Result<(Node, usize), ScanError> {
        let at = position(&span);
        let too_deep = || {
            ScanError::new(
                span.start,
                format!("lists and maps nest deeper than {MAX_DEPTH} levels, the most a file may"),
            )
        };
        let (nodes_before, text_before) = (self.nodes, self.text);
        let (node, height, anchor) = match event {
            Event::Scalar(text, style, anchor, _) => {
                self.own(text.len());
                let yaml = Yaml::Scalar {
                    text: text.into_owned(),
                    plain: style == ScalarStyle::Plain,
                };
                (Node { at, yaml }, 0, anchor)
            }
            Event::SequenceStart(anchor, _) => {
                if depth > MAX_DEPTH {
                    return Err(too_deep());
                }
                self.own(0);
                let mut items = Vec::new();
                let mut height = 0;
                loop {
                    let (event, span) = self.next()?;
                    if event == Event::SequenceEnd {
                        break;
                    }
                    let (item, h) = self.node(event, span, depth + 1)?;
                    height = height.max(h);
                    items.push(item);
                }
                let yaml = Yaml::List(items);
                (Node { at, yaml }, height + 1, anchor)
            }
            Event::MappingStart(anchor, _) => {
                if depth > MAX_DEPTH {
                    return Err(too_deep());
                }
                self.own(0);
                let (pairs, height) = self.map(depth)?;
                (
                    Node {
                        at,
                        yaml: Yaml::Map(pairs),
                    },
                    height + 1,
                    anchor,
                )
            }
            Event::Alias(id) => {
                let Some(anchored) = self.anchors.get(&id) else {
                    return Err(ScanError::new_str(span.start, "unknown alias"));
                };
                let (nodes, text, height) = (anchored.nodes, anchored.text, anchored.height);
                if depth + height > MAX_DEPTH {
                    return Err(too_deep());
                }
                // Charged before copying, so a bomb is refused before it takes memory.
                self.copy(&span, nodes, text)?;
                return Ok((self.anchors[&id].node.clone(), height));
            }
            _ => return Err(ScanError::new_str(span.start, "unexpected YAML event")),
        };
        if anchor > 0 {
            let anchored = Anchored {
                node: node.clone(),
                nodes: self.nodes - nodes_before,
                text: self.text - text_before,
                height,
            };
            self.anchors.insert(anchor, anchored);
        }
        Ok((node, height))
    }

    /// A map's pairs after its `MappingStart`, merge keys applied, with its height less one.
    fn map(&mut self, depth: usize) -> Result<(Vec<(Node, Node)>, usize), ScanError> {
        let mut pairs: Vec<(Node, Node)> = Vec::new();
        let mut merged: Vec<(Node, Node)> = Vec::new();
        let mut height = 0;
        loop {
            let (event, span) = self.next()?;
            if event == Event::MappingEnd {
                break;
            }
            let (key, kh) = self.node(event, span, depth + 1)?;
            let (event, span) = self.next()?;
            let (value, vh) = self.node(event, span, depth + 1)?;
            height = height.max(kh).max(vh);
            // `<<: *base` (YAML 1.1 merge keys, which Go's yaml.v2 applies).
            if matches!(&key.yaml, Yaml::Scalar { text, plain: true } if text == "<<") {
                let sources = match value.yaml {
                    Yaml::List(items) => items,
                    other => vec![Node {
                        at: value.at,
                        yaml: other,
                    }],
                };
                for source in sources {
                    match source.yaml {
                        Yaml::Map(p) => merged.extend(p),
                        _ => {
                            return Err(ScanError::new_str(
                                span.start,
                                "a `<<` merge key needs a map or a list of maps",
                            ))
                        }
                    }
                }
                continue;
            }
            pairs.push((key, value));
        }
        // A key given in the map itself wins over a merged one, and the first merged source
        // over later ones. Looked up in a set: a map and its merges may hold many keys.
        let mut given: HashSet<String> = pairs.iter().filter_map(|(k, _)| scalar(k)).collect();
        for (k, v) in merged {
            let fresh = match scalar(&k) {
                Some(text) => given.insert(text),
                None => true,
            };
            if fresh {
                pairs.push((k, v));
            }
        }
        Ok((pairs, height))
    }
}

fn scalar(node: &Node) -> Option<String> {
    match &node.yaml {
        Yaml::Scalar { text, .. } => Some(text.clone()),
        _ => None,
    }
}
