//! The credentials of one managed sandbox, as its proxy holds them: the Sandbox's own
//! and those of each Session and Process on it ("owners"), each lent a placeholder that
//! stays the same for as long as the sandbox and the owner's credential do, so a
//! reconcile never restarts an agent for a new one.
//!
//! The values live here and in the proxy, in the controller's memory; the sandbox, its
//! node agent and everything written into it see placeholders only.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use agentplane_egress::{CredentialCount, Credentials, NewCredential};

/// A credential's value resolved from its source, with where it may go.
#[derive(Clone, PartialEq, Eq)]
pub struct Resolved {
    pub name: String,
    pub value: String,
    pub hosts: Vec<String>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved").field("name", &self.name).field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

/// The owner the Sandbox's own credentials are lent under.
pub const SANDBOX_OWNER: &str = "";

/// What the placeholders begin with: says what it is to whoever finds one in a log.
const PLACEHOLDER_PREFIX: &str = "agentplane-credential-";

struct Lent {
    placeholder: String,
    resolved: Resolved,
}

/// One sandbox's credentials: lent placeholders, and the proxy's table made of them.
#[derive(Default)]
pub struct Book {
    proxy: Arc<Credentials>,
    /// (owner, variable) to what was lent.
    lent: Mutex<BTreeMap<(String, String), Lent>>,
}

impl Book {
    /// What the sandbox's proxy swaps.
    pub fn proxy(&self) -> Arc<Credentials> {
        Arc::clone(&self.proxy)
    }

    pub fn counts(&self) -> Vec<CredentialCount> {
        self.proxy.counts()
    }

    /// Lends `owner` a placeholder for each of `credentials` (the same one as before for
    /// a credential that did not change), forgets what it had and no longer has, and
    /// gives the proxy the new table. Answers each variable's placeholder.
    pub fn lend(&self, owner: &str, credentials: Vec<Resolved>) -> Result<BTreeMap<String, String>, String> {
        let mut lent = self.lent.lock().unwrap_or_else(|e| e.into_inner());
        let mut next: BTreeMap<(String, String), Lent> =
            lent.iter().filter(|((o, _), _)| o != owner).map(|(k, v)| (k.clone(), v.clone_lent())).collect();
        let mut placeholders = BTreeMap::new();
        for resolved in credentials {
            let key = (owner.to_string(), resolved.name.clone());
            let placeholder = match lent.get(&key) {
                Some(old) if old.resolved.hosts == resolved.hosts => old.placeholder.clone(),
                _ => format!("{PLACEHOLDER_PREFIX}{}", agentplane_node_agent::random::hex(24)),
            };
            placeholders.insert(resolved.name.clone(), placeholder.clone());
            next.insert(key, Lent { placeholder, resolved });
        }
        self.proxy.set(table(&next)).map_err(|e| e.to_string())?;
        *lent = next;
        Ok(placeholders)
    }

    /// Forgets what `owner` was lent; whether it had anything.
    pub fn release(&self, owner: &str) -> bool {
        let mut lent = self.lent.lock().unwrap_or_else(|e| e.into_inner());
        let before = lent.len();
        lent.retain(|(o, _), _| o != owner);
        if lent.len() == before {
            return false;
        }
        // Taking credentials away cannot make the table invalid.
        let _ = self.proxy.set(table(&lent));
        true
    }
}

impl Lent {
    fn clone_lent(&self) -> Lent {
        Lent { placeholder: self.placeholder.clone(), resolved: self.resolved.clone() }
    }
}

fn table(lent: &BTreeMap<(String, String), Lent>) -> Vec<NewCredential> {
    lent.values()
        .map(|l| NewCredential {
            name: l.resolved.name.clone(),
            placeholder: l.placeholder.clone(),
            value: l.resolved.value.clone(),
            hosts: l.resolved.hosts.clone(),
        })
        .collect()
}

/// Every managed sandbox's book, by sandbox name: made on first use (a Session may be
/// looked at before its sandbox), dropped with the sandbox.
#[derive(Default)]
pub struct Books {
    books: Mutex<HashMap<String, Arc<Book>>>,
}

impl Books {
    pub fn of(&self, sandbox: &str) -> Arc<Book> {
        let mut books = self.books.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(books.entry(sandbox.to_string()).or_default())
    }

    /// Lends `owner` its credentials on `sandbox`, releasing what it had on any other.
    pub fn lend(
        &self,
        sandbox: &str,
        owner: &str,
        credentials: Vec<Resolved>,
    ) -> Result<BTreeMap<String, String>, String> {
        self.release_except(owner, Some(sandbox));
        self.of(sandbox).lend(owner, credentials)
    }

    /// Forgets what `owner` was lent anywhere; the names of the sandboxes it was on.
    pub fn release(&self, owner: &str) -> Vec<String> {
        self.release_except(owner, None)
    }

    fn release_except(&self, owner: &str, keep: Option<&str>) -> Vec<String> {
        let books: Vec<(String, Arc<Book>)> = {
            let books = self.books.lock().unwrap_or_else(|e| e.into_inner());
            books
                .iter()
                .filter(|(name, _)| Some(name.as_str()) != keep)
                .map(|(n, b)| (n.clone(), Arc::clone(b)))
                .collect()
        };
        books.into_iter().filter(|(_, book)| book.release(owner)).map(|(name, _)| name).collect()
    }

    pub fn remove(&self, sandbox: &str) {
        self.books.lock().unwrap_or_else(|e| e.into_inner()).remove(sandbox);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(name: &str, value: &str, hosts: &[&str]) -> Resolved {
        Resolved { name: name.into(), value: value.into(), hosts: hosts.iter().map(|h| h.to_string()).collect() }
    }

    #[test]
    fn placeholders_stay_while_the_credential_does_and_are_never_the_value() {
        let book = Book::default();
        let first = book.lend("Session/default/a", vec![resolved("KEY", "sk-1", &["api.example"])]).unwrap();
        assert!(first["KEY"].starts_with(PLACEHOLDER_PREFIX) && !first["KEY"].contains("sk-1"));
        // A new value (rotated) keeps the placeholder; the proxy has the new value.
        let again = book.lend("Session/default/a", vec![resolved("KEY", "sk-2", &["api.example"])]).unwrap();
        assert_eq!(first, again);
        // Other hosts: a new placeholder, so the old one is no longer honoured.
        let moved = book.lend("Session/default/a", vec![resolved("KEY", "sk-2", &["other.example"])]).unwrap();
        assert_ne!(first["KEY"], moved["KEY"]);
        // Owners get their own placeholders for the same variable.
        let other = book.lend("Session/default/b", vec![resolved("KEY", "sk-3", &["api.example"])]).unwrap();
        assert_ne!(other["KEY"], moved["KEY"]);
        assert_eq!(book.counts().len(), 2);
    }

    #[test]
    fn releasing_an_owner_drops_only_its_credentials() {
        let books = Books::default();
        books.lend("iso", SANDBOX_OWNER, vec![resolved("A", "a-value", &["a.example"])]).unwrap();
        books.lend("iso", "Session/default/s", vec![resolved("B", "b-value", &["b.example"])]).unwrap();
        // The session moves to another sandbox: its credential goes with it.
        books.lend("iso2", "Session/default/s", vec![resolved("B", "b-value", &["b.example"])]).unwrap();
        assert_eq!(books.of("iso").counts().iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["A"]);
        assert_eq!(books.release("Session/default/s"), ["iso2"]);
        assert!(books.of("iso2").counts().is_empty());
        assert_eq!(books.of("iso").counts().len(), 1);
    }

    #[test]
    fn an_invalid_credential_changes_nothing() {
        let book = Book::default();
        let kept = book.lend("o", vec![resolved("A", "a-value", &["a.example"])]).unwrap();
        let error = book.lend("o", vec![resolved("A", "bad\nvalue", &["a.example"])]).unwrap_err();
        assert!(!error.contains("bad\nvalue"), "{error}");
        let error = book.lend("o", vec![resolved("A", "v", &["bad host/"])]).unwrap_err();
        assert!(error.contains("bad host/"), "{error}");
        assert_eq!(book.lend("o", vec![resolved("A", "a-value", &["a.example"])]).unwrap(), kept);
    }
}
