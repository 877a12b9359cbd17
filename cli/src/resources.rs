//! The contract of the resource verbs and the stores they ask (the watched directory
//! of `workspace`, the cluster of `cluster`, put together by `store`): how a person
//! names resources on the command line and how they are printed back, what a listing
//! selects, what watching it learns, what a store can tell of events, and the items
//! `send` and `reply` append to a Session. It depends on neither store, so that
//! neither store depends on the other or on `store`.

use agentplane_crds::{Key, Kind, Object, ResourceRef};
use agentplane_crds::{Reply, Session, SessionSpec};
use anyhow::bail;
use k8s_openapi::api::core::v1::Event;
use serde::Serialize;

/// The kind as people type it: `process`, not `Process`.
pub fn kind_word(kind: Kind) -> String {
    kind.as_str().to_ascii_lowercase()
}

/// `process/web`, as the verbs print resources.
pub fn ref_name(key: &Key) -> String {
    format!("{}/{}", kind_word(key.kind), key.name)
}

pub fn not_found(key: &Key) -> anyhow::Error {
    anyhow::anyhow!("{} {:?} not found in namespace {:?}", kind_word(key.kind), key.name, key.namespace)
}

pub fn parse_kind(word: &str) -> anyhow::Result<Kind> {
    Ok(word.parse::<Kind>()?)
}

/// `KIND/NAME ...`, `KIND NAME ...`, or (for verbs about one kind) `NAME`.
pub fn parse_refs(words: &[String], default_kind: Option<Kind>) -> anyhow::Result<Vec<(Kind, String)>> {
    let Some(first) = words.first() else { bail!("name a resource: KIND/NAME") };
    if first.contains('/') {
        return words
            .iter()
            .map(|word| {
                let ResourceRef { kind, name } = word.parse()?;
                Ok((kind, name))
            })
            .collect();
    }
    if words.len() > 1
        && let Some(kind) = Kind::from_user(first)
    {
        return Ok(words[1..].iter().map(|name| (kind, name.clone())).collect());
    }
    match default_kind {
        Some(kind) => Ok(words.iter().map(|name| (kind, name.clone())).collect()),
        None if words.len() == 1 => bail!("{first:?}: expected KIND/NAME or KIND NAME"),
        None => bail!(
            "unknown kind {first:?}: use processes (proc), sessions (sess), sandboxes (sbx), sandboxtemplates (sbxt) or sandboxwarmpools (sbxpool)"
        ),
    }
}

/// One resource of the given kind, for verbs that act on exactly one.
pub fn parse_one(words: &[String], kind: Kind) -> anyhow::Result<String> {
    let refs = parse_refs(words, Some(kind))?;
    match refs.as_slice() {
        [(k, name)] if *k == kind => Ok(name.clone()),
        [(k, _)] => bail!("this verb acts on a {}, not a {}", kind_word(kind), kind_word(*k)),
        _ => bail!("name one {}", kind_word(kind)),
    }
}

/// The resources a listing is about.
pub struct Selection {
    pub kind: Kind,
    pub namespace: String,
    pub all_namespaces: bool,
    /// Only this one.
    pub name: Option<String>,
}

impl Selection {
    pub fn scope(&self) -> Option<&str> {
        (!self.all_namespaces).then_some(self.namespace.as_str())
    }

    pub fn key(&self, name: &str) -> Key {
        Key { kind: self.kind, namespace: self.namespace.clone(), name: name.to_string() }
    }
}

/// What watching a selection learns.
pub enum Change {
    /// Everything selected, as it is now: what is not in it is gone.
    All(Vec<Object>),
    /// One resource, added or changed.
    Applied(Box<Object>),
    Deleted(Key),
}

/// What a store can tell of the events about a resource.
pub enum Events {
    /// The directory store records none.
    NotKept,
    Listed(Vec<Event>),
    /// Why they cannot be shown (a user may not be allowed to list them).
    Unavailable(String),
}

/// An item appended to a Session's spec: what `send` and `reply` add. Serialized as
/// the item itself, so that a file gets the same YAML either way.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum SpecItem {
    Message(String),
    Reply(Reply),
}

impl SpecItem {
    /// The list under `spec` it goes to.
    pub fn list(&self) -> &'static str {
        match self {
            SpecItem::Message(_) => "messages",
            SpecItem::Reply(_) => "replies",
        }
    }

    /// How many items that list holds.
    pub fn count(&self, spec: &SessionSpec) -> usize {
        match self {
            SpecItem::Message(_) => spec.messages.len(),
            SpecItem::Reply(_) => spec.replies.len(),
        }
    }

    /// Appends it to `spec`; returns how many items the list then holds.
    pub fn push(&self, spec: &mut SessionSpec) -> usize {
        match self {
            SpecItem::Message(text) => spec.messages.push(text.clone()),
            SpecItem::Reply(reply) => spec.replies.push(reply.clone()),
        }
        self.count(spec)
    }

    /// A reply must answer what the Session asks now: one saved for an id that is not
    /// pending would approve whatever request later comes with that id.
    pub fn check_answers(&self, session: &Session) -> anyhow::Result<()> {
        let SpecItem::Reply(reply) = self else { return Ok(()) };
        let status = session.status.clone().unwrap_or_default();
        let asked = status
            .pending_permissions
            .iter()
            .map(|p| p.id.as_str())
            .chain(status.pending_questions.iter().map(|q| q.id.as_str()));
        let asked: Vec<&str> = asked.collect();
        if asked.contains(&reply.id.as_str()) {
            return Ok(());
        }
        let name = session.metadata.name.clone().unwrap_or_default();
        let pending = if asked.is_empty() {
            "it asks nothing now".to_string()
        } else {
            format!("it waits for {}", asked.join(", "))
        };
        bail!(
            "session/{name} has no pending question or permission request {:?} ({pending}): see `agentplane describe session {name}`",
            reply.id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_in_every_spelling() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_refs(&words(&["proc/web", "sess/chat"]), None).unwrap(),
            vec![(Kind::Process, "web".into()), (Kind::Session, "chat".into())]
        );
        assert_eq!(
            parse_refs(&words(&["processes", "a", "b"]), None).unwrap(),
            vec![(Kind::Process, "a".into()), (Kind::Process, "b".into())]
        );
        assert_eq!(parse_refs(&words(&["web"]), Some(Kind::Process)).unwrap(), vec![(Kind::Process, "web".into())]);
        assert!(parse_refs(&words(&["pod/web"]), None).is_err());
        assert!(parse_refs(&words(&["web"]), None).is_err());
        assert!(parse_one(&words(&["session/x"]), Kind::Process).is_err());
    }

    /// The modules that name another module of the crate, as their source does.
    fn uses(source: &str) -> Vec<&str> {
        let mut used: Vec<&str> = source
            .match_indices("crate::")
            .filter_map(|(at, _)| source[at + 7..].split(|c: char| !c.is_ascii_alphanumeric() && c != '_').next())
            .collect();
        used.sort();
        used.dedup();
        used
    }

    #[test]
    fn the_stores_depend_on_this_contract_and_not_on_each_other() {
        let contract = uses(include_str!("resources.rs"));
        let cluster = uses(include_str!("cluster.rs"));
        let workspace = uses(include_str!("workspace.rs"));
        for (module, used) in [("resources", &contract), ("cluster", &cluster), ("workspace", &workspace)] {
            for other in ["store", "cluster", "workspace"] {
                assert!(other == module || !used.contains(&other), "{module}.rs uses crate::{other}: {used:?}");
            }
        }
        assert!(cluster.contains(&"resources") && workspace.contains(&"resources"));
        let store = uses(include_str!("store.rs"));
        assert!(["cluster", "resources", "workspace"].iter().all(|m| store.contains(m)), "{store:?}");
    }
}
