//! A resource's identity, the same for the CLI and both stores: its `Kind`, its `Key`
//! (kind, namespace, name) and one resource of any kind (`Object`); and how people and
//! annotations write them: `KIND/NAME` on a command line (`ResourceRef`, any of the
//! names `kubectl`-style short forms take), `Kind/namespace/name` in the annotation a
//! node agent object carries (`Key`'s `Display` and `FromStr`).

use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::{Process, Sandbox, SandboxTemplate, SandboxWarmPool, Session};

/// Why a resource's identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "unknown kind {0:?}: use processes (proc), sessions (sess), sandboxes (sbx), sandboxtemplates (sbxt) or sandboxwarmpools (sbxpool)"
    )]
    UnknownKind(String),
    #[error("{0:?}: expected KIND/NAME")]
    NotAReference(String),
    #[error("{0:?}: expected Kind/namespace/name")]
    NotAKey(String),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

pub const API_VERSION: &str = "agentplane.dev/v1alpha1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    Sandbox,
    Session,
    Process,
    SandboxTemplate,
    SandboxWarmPool,
}

impl Kind {
    pub const ALL: [Kind; 5] =
        [Kind::Sandbox, Kind::Session, Kind::Process, Kind::SandboxTemplate, Kind::SandboxWarmPool];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sandbox => "Sandbox",
            Kind::Session => "Session",
            Kind::Process => "Process",
            Kind::SandboxTemplate => "SandboxTemplate",
            Kind::SandboxWarmPool => "SandboxWarmPool",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Kind::Sandbox => "sandboxes",
            Kind::Session => "sessions",
            Kind::Process => "processes",
            Kind::SandboxTemplate => "sandboxtemplates",
            Kind::SandboxWarmPool => "sandboxwarmpools",
        }
    }

    /// The kind a user names on the command line: `process`, `processes`, `proc`, ...
    pub fn from_user(name: &str) -> Option<Kind> {
        match name.to_ascii_lowercase().as_str() {
            "sandbox" | "sandboxes" | "sbx" => Some(Kind::Sandbox),
            "session" | "sessions" | "sess" => Some(Kind::Session),
            "process" | "processes" | "proc" | "procs" => Some(Kind::Process),
            "sandboxtemplate" | "sandboxtemplates" | "sbxt" => Some(Kind::SandboxTemplate),
            "sandboxwarmpool" | "sandboxwarmpools" | "sbxpool" | "sbxpools" => Some(Kind::SandboxWarmPool),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource's identity in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// One resource of any kind, as declared or as stored.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "an Object is one resource held by value where it is read or written; every variant is a whole \
              resource of about the same size, and boxing them would only add an allocation each"
)]
pub enum Object {
    Sandbox(Sandbox),
    Session(Session),
    Process(Process),
    SandboxTemplate(SandboxTemplate),
    SandboxWarmPool(SandboxWarmPool),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Sandbox(_) => Kind::Sandbox,
            Object::Session(_) => Kind::Session,
            Object::Process(_) => Kind::Process,
            Object::SandboxTemplate(_) => Kind::SandboxTemplate,
            Object::SandboxWarmPool(_) => Kind::SandboxWarmPool,
        }
    }

    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Sandbox(o) => &o.metadata,
            Object::Session(o) => &o.metadata,
            Object::Process(o) => &o.metadata,
            Object::SandboxTemplate(o) => &o.metadata,
            Object::SandboxWarmPool(o) => &o.metadata,
        }
    }

    pub fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Object::Sandbox(o) => &mut o.metadata,
            Object::Session(o) => &mut o.metadata,
            Object::Process(o) => &mut o.metadata,
            Object::SandboxTemplate(o) => &mut o.metadata,
            Object::SandboxWarmPool(o) => &mut o.metadata,
        }
    }

    pub fn key(&self) -> Key {
        let meta = self.meta();
        Key {
            kind: self.kind(),
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// Whether two objects declare the same spec (what bumps `metadata.generation`).
    pub fn same_spec(&self, other: &Object) -> bool {
        match (self, other) {
            (Object::Sandbox(a), Object::Sandbox(b)) => a.spec == b.spec,
            (Object::Session(a), Object::Session(b)) => a.spec == b.spec,
            (Object::Process(a), Object::Process(b)) => a.spec == b.spec,
            (Object::SandboxTemplate(a), Object::SandboxTemplate(b)) => a.spec == b.spec,
            (Object::SandboxWarmPool(a), Object::SandboxWarmPool(b)) => a.spec == b.spec,
            _ => false,
        }
    }

    /// Takes `other`'s spec, keeping this object's metadata and status.
    pub fn take_spec(&mut self, other: &Object) {
        match (self, other) {
            (Object::Sandbox(a), Object::Sandbox(b)) => a.spec = b.spec.clone(),
            (Object::Session(a), Object::Session(b)) => a.spec = b.spec.clone(),
            (Object::Process(a), Object::Process(b)) => a.spec = b.spec.clone(),
            (Object::SandboxTemplate(a), Object::SandboxTemplate(b)) => a.spec = b.spec.clone(),
            (Object::SandboxWarmPool(a), Object::SandboxWarmPool(b)) => a.spec = b.spec.clone(),
            _ => {}
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Object::Sandbox(o) => serde_json::to_value(o),
            Object::Session(o) => serde_json::to_value(o),
            Object::Process(o) => serde_json::to_value(o),
            Object::SandboxTemplate(o) => serde_json::to_value(o),
            Object::SandboxWarmPool(o) => serde_json::to_value(o),
        };
        value.expect("resources serialize to JSON")
    }

    pub fn from_json(value: serde_json::Value) -> Result<Object, IdentityError> {
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or_default().to_string();
        let object = match kind.as_str() {
            "Sandbox" => serde_json::from_value(value).map(Object::Sandbox),
            "Session" => serde_json::from_value(value).map(Object::Session),
            "Process" => serde_json::from_value(value).map(Object::Process),
            "SandboxTemplate" => serde_json::from_value(value).map(Object::SandboxTemplate),
            "SandboxWarmPool" => serde_json::from_value(value).map(Object::SandboxWarmPool),
            _ => return Err(IdentityError::UnknownKind(kind)),
        };
        object.map_err(IdentityError::Json)
    }
}

impl FromStr for Kind {
    type Err = IdentityError;

    /// Any name a user may write (see [`Kind::from_user`]).
    fn from_str(word: &str) -> Result<Kind, IdentityError> {
        Kind::from_user(word).ok_or_else(|| IdentityError::UnknownKind(word.to_string()))
    }
}

impl FromStr for Key {
    type Err = IdentityError;

    /// `Kind/namespace/name`, as [`Key`]'s `Display` writes it (the annotation on what a
    /// controller starts on a node agent).
    fn from_str(text: &str) -> Result<Key, IdentityError> {
        let mut parts = text.splitn(3, '/');
        let (Some(kind), Some(namespace), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(IdentityError::NotAKey(text.to_string()));
        };
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind)
            .ok_or_else(|| IdentityError::NotAKey(text.to_string()))?;
        if namespace.is_empty() || name.is_empty() {
            return Err(IdentityError::NotAKey(text.to_string()));
        }
        Ok(Key { kind, namespace: namespace.to_string(), name: name.to_string() })
    }
}

/// A resource as a person names it: `KIND/NAME` (`process/web`, `sess/review`), in
/// the namespace the command works in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceRef {
    pub kind: Kind,
    pub name: String,
}

impl ResourceRef {
    pub fn new(kind: Kind, name: impl Into<String>) -> ResourceRef {
        ResourceRef { kind, name: name.into() }
    }

    /// `KIND/NAME` when `word` has a slash; else `NAME` of `default` when there is one.
    pub fn parse_or(word: &str, default: Option<Kind>) -> Result<ResourceRef, IdentityError> {
        match (word.contains('/'), default) {
            (true, _) => word.parse(),
            (false, Some(kind)) if !word.is_empty() => Ok(ResourceRef::new(kind, word)),
            (false, _) => Err(IdentityError::NotAReference(word.to_string())),
        }
    }

    /// Its key in `namespace`.
    pub fn in_namespace(&self, namespace: impl Into<String>) -> Key {
        Key { kind: self.kind, namespace: namespace.into(), name: self.name.clone() }
    }
}

impl FromStr for ResourceRef {
    type Err = IdentityError;

    fn from_str(word: &str) -> Result<ResourceRef, IdentityError> {
        match word.split_once('/') {
            Some((kind, name)) if !name.is_empty() && !name.contains('/') => {
                Ok(ResourceRef { kind: kind.parse()?, name: name.to_string() })
            }
            _ => Err(IdentityError::NotAReference(word.to_string())),
        }
    }
}

impl fmt::Display for ResourceRef {
    /// `process/web`: what `ResourceRef::from_str` reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_str().to_ascii_lowercase(), self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_reads_back_what_it_writes_in_every_short_form() {
        for (word, kind) in
            [("proc/web", Kind::Process), ("sessions/web", Kind::Session), ("sbxpool/web", Kind::SandboxWarmPool)]
        {
            let parsed: ResourceRef = word.parse().unwrap();
            assert_eq!(parsed, ResourceRef::new(kind, "web"));
            assert_eq!(parsed.to_string().parse::<ResourceRef>().unwrap(), parsed);
        }
        assert_eq!(ResourceRef::new(Kind::SandboxTemplate, "t").to_string(), "sandboxtemplate/t");
        assert!(matches!("pods/web".parse::<ResourceRef>(), Err(IdentityError::UnknownKind(k)) if k == "pods"));
        assert!(matches!("process/".parse::<ResourceRef>(), Err(IdentityError::NotAReference(_))));
        assert!(matches!("process/a/b".parse::<ResourceRef>(), Err(IdentityError::NotAReference(_))));
        assert_eq!(ResourceRef::parse_or("web", Some(Kind::Process)).unwrap(), ResourceRef::new(Kind::Process, "web"));
        assert!(ResourceRef::parse_or("web", None).is_err());
    }

    #[test]
    fn a_key_reads_back_what_it_writes() {
        let key = Key { kind: Kind::Process, namespace: "team-a".into(), name: "web".into() };
        assert_eq!(key.to_string(), "Process/team-a/web");
        assert_eq!(key.to_string().parse::<Key>().unwrap(), key);
        assert!("process/team-a/web".parse::<Key>().is_err(), "the annotation form names the Kind as written");
        assert!("Process/web".parse::<Key>().is_err());
        // Moved from the folder store, whose annotation reader this replaced.
        assert_eq!("Process/team/web".parse::<Key>().unwrap().to_string(), "Process/team/web");
        assert!("Pod/a/b".parse::<Key>().is_err());
        assert!("Process//web".parse::<Key>().is_err());
    }
}
