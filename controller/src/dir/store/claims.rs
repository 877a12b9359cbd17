//! Sandboxes made from templates, in the store's index: claims by Sessions and
//! Processes, warm pools kept full, and the TTL after a claimer finishes (the
//! decisions themselves are in `dir::pools`).

use super::*;

/// Why a Session or Process has no sandbox of its template yet: said in its status
/// (its `Valid` condition) while it waits.
#[derive(Debug, thiserror::Error)]
pub(super) enum ClaimError {
    #[error("it has no uid yet")]
    NoUid,
    #[error("sandboxTemplate {template:?}: no SandboxTemplate of that name in namespace {namespace:?}")]
    NoTemplate { template: String, namespace: String },
    /// `what` is the record that could not be written: a sandbox made, or a claim.
    /// Boxed: the crate's error is large, and this one is returned on every claim.
    #[error("cannot record {what}: {source}")]
    Record {
        what: String,
        #[source]
        source: Box<crate::Error>,
    },
}

impl Inner {
    pub(super) async fn reconcile_template(self: &Arc<Self>, key: &Key, template: agentplane_crds::SandboxTemplate) {
        // Nothing runs from a template itself; the pools that wait for it go on.
        if template.metadata.deletion_timestamp.is_some() {
            self.forget(key, template.metadata.uid.clone()).await;
        }
        self.enqueue_kind(Kind::SandboxWarmPool);
    }

    pub(super) async fn reconcile_pool(
        self: &Arc<Self>,
        key: &Key,
        pool: agentplane_crds::SandboxWarmPool,
        problem: Option<String>,
    ) {
        if pool.metadata.deletion_timestamp.is_some() {
            let (this, k) = (Arc::clone(self), key.clone());
            let _ = tokio::task::spawn_blocking(move || this.drain_pool(&k)).await;
            self.forget(key, pool.metadata.uid.clone()).await;
            return;
        }
        let (this, k, uid) = (Arc::clone(self), key.clone(), pool.metadata.uid.clone());
        let status =
            tokio::task::spawn_blocking(move || this.pool_status(&k, &pool, problem)).await.unwrap_or_default();
        self.write_status(key, uid, move |object| match object {
            Object::SandboxWarmPool(p) if p.status.as_ref() != Some(&status) => {
                p.status = Some(status);
                true
            }
            _ => false,
        })
        .await;
    }

    pub(super) fn enqueue_kind(&self, kind: Kind) {
        let keys: Vec<Key> = self.lock().resources.keys().filter(|k| k.kind == kind).cloned().collect();
        for key in keys {
            self.queue.add(key);
        }
    }

    /// Records a new object the store made (a sandbox of a template) and looks at it.
    pub(super) fn add_made(&self, index: &mut Index, object: Object) -> std::result::Result<Key, ClaimError> {
        let key = object.key();
        self.state.write(&object).map_err(|e| ClaimError::Record { what: key.to_string(), source: Box::new(e) })?;
        index.resources.insert(key.clone(), Entry { object, problem: None, missing_since: None, recorded: true });
        self.queue.add(key.clone());
        Ok(key)
    }

    /// The sandbox the resource `key` runs on for its `sandboxTemplate`: the one it
    /// holds, else a ready one from a warm pool of that template (which then refills),
    /// else a new one. Under the index lock: two claimers never take the same one.
    pub(super) fn claim(
        &self,
        index: &mut Index,
        key: &Key,
        template: &str,
    ) -> std::result::Result<String, ClaimError> {
        use crate::dir::pools::{self, Found};
        let Some(uid) = index.resources.get(key).and_then(|e| e.object.meta().uid.clone()) else {
            return Err(ClaimError::NoUid);
        };
        match pools::find(index.resources.iter().map(|(k, e)| (k, &e.object)), &key.namespace, template, &uid) {
            Found::Held(name) => return Ok(name),
            Found::FromPool(member) => {
                let ttl =
                    self.template(index, &key.namespace, template).map_or(60, |t| t.spec.ttl_seconds_after_finished);
                let entry = index.resources.get_mut(&member).expect("found in the index");
                let mut object = entry.object.clone();
                object
                    .meta_mut()
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .extend(pools::claim_annotations(key, &uid, ttl));
                self.state
                    .write(&object)
                    .map_err(|e| ClaimError::Record { what: format!("the claim of {member}"), source: Box::new(e) })?;
                entry.object = object;
                info!(resource = %key, sandbox = %member.name, "claimed a ready sandbox from its warm pool");
                self.queue.add(member.clone());
                // The pool refills (the index is locked here: its keys are taken from it).
                for pool in index.resources.keys().filter(|k| k.kind == Kind::SandboxWarmPool) {
                    self.queue.add(pool.clone());
                }
                return Ok(member.name);
            }
            Found::Nothing => {}
        }
        let Some(found) = self.template(index, &key.namespace, template) else {
            return Err(ClaimError::NoTemplate { template: template.to_string(), namespace: key.namespace.clone() });
        };
        let name = pools::fresh_name(|k| index.resources.contains_key(k), &key.namespace, template);
        let annotations = BTreeMap::from(pools::claim_annotations(key, &uid, found.spec.ttl_seconds_after_finished));
        let object = pools::sandbox_of(&found, &name, &key.namespace, annotations, &conditions::now());
        self.add_made(index, object)?;
        info!(resource = %key, sandbox = %name, "made a sandbox of its own from its template");
        Ok(name)
    }

    pub(super) fn template(
        &self,
        index: &Index,
        namespace: &str,
        name: &str,
    ) -> Option<agentplane_crds::SandboxTemplate> {
        let key = Key { kind: Kind::SandboxTemplate, namespace: namespace.to_string(), name: name.to_string() };
        match &index.resources.get(&key)?.object {
            Object::SandboxTemplate(t) if t.metadata.deletion_timestamp.is_none() => Some(t.clone()),
            _ => None,
        }
    }

    /// Marks the sandboxes claimed by `uid` finished: each is deleted after its TTL.
    pub(super) async fn finish_claims(self: &Arc<Self>, uid: Option<String>) {
        let Some(uid) = uid else { return };
        let this = Arc::clone(self);
        let _ = tokio::task::spawn_blocking(move || {
            let mut index = this.lock();
            let now = conditions::now().0.to_string();
            for (key, entry) in index.resources.iter_mut() {
                let meta = entry.object.meta();
                if key.kind != Kind::Sandbox
                    || crate::dir::pools::claimed_uid(meta) != Some(uid.as_str())
                    || crate::dir::pools::ttl_left(meta, &conditions::now()).is_some()
                {
                    continue;
                }
                let mut object = entry.object.clone();
                object
                    .meta_mut()
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(crate::dir::pools::FINISHED_AT.into(), now.clone());
                match this.state.write(&object) {
                    Ok(()) => {
                        entry.object = object;
                        this.queue.add(key.clone());
                    }
                    Err(e) => warn!(resource = %key, error = %e, "cannot record that its claimer finished"),
                }
            }
        })
        .await;
    }

    /// Marks a store-made sandbox deleted (recorded first); answers it as marked.
    pub(super) fn mark_deleted(&self, key: &Key) -> Option<agentplane_crds::Sandbox> {
        let mut index = self.lock();
        let entry = index.resources.get_mut(key)?;
        let mut object = entry.object.clone();
        object.meta_mut().deletion_timestamp = Some(conditions::now());
        if let Err(e) = self.state.write(&object) {
            warn!(resource = %key, error = %e, "cannot record the deletion");
            return None;
        }
        entry.object = object.clone();
        match object {
            Object::Sandbox(s) => Some(s),
            _ => None,
        }
    }

    /// Keeps `replicas` unclaimed sandboxes of the pool's template: makes what is
    /// missing, deletes what is over (those not ready first).
    pub(super) fn pool_status(
        &self,
        key: &Key,
        pool: &agentplane_crds::SandboxWarmPool,
        problem: Option<String>,
    ) -> agentplane_crds::SandboxWarmPoolStatus {
        use crate::dir::pools;
        let generation = pool.metadata.generation;
        let mut status = pool.status.clone().unwrap_or_default();
        status.observed_generation = generation;
        conditions::set_valid(&mut status.conditions, problem.as_deref(), generation);
        let mut index = self.lock();
        let mut members =
            pools::members(index.resources.iter().map(|(k, e)| (k, &e.object)), &key.namespace, &key.name);
        let wanted = pool.spec.replicas as usize;
        match self.template(&index, &key.namespace, &pool.spec.template) {
            None => {
                let why = format!("no SandboxTemplate {:?} in namespace {:?}", pool.spec.template, key.namespace);
                conditions::set(&mut status.conditions, READY, false, "TemplateNotFound", why, generation);
            }
            Some(template) => {
                while members.len() < wanted {
                    let name = pools::fresh_name(|k| index.resources.contains_key(k), &key.namespace, &key.name);
                    let annotations = BTreeMap::from([(pools::POOL.to_string(), key.name.clone())]);
                    let object = pools::sandbox_of(&template, &name, &key.namespace, annotations, &conditions::now());
                    match self.add_made(&mut index, object) {
                        Ok(made) => members.push((made, false)),
                        Err(e) => {
                            warn!(pool = %key, error = %e, "cannot make a sandbox for the pool");
                            break;
                        }
                    }
                }
                // Over: not-ready ones go first.
                members.sort_by_key(|(_, ready)| !ready);
                while members.len() > wanted {
                    let (extra, _) = members.pop().expect("more than wanted");
                    drop(index);
                    self.mark_deleted(&extra);
                    self.queue.add(extra);
                    index = self.lock();
                }
                let ready = members.iter().filter(|(_, r)| *r).count();
                let message = format!("{ready} of {wanted} ready");
                conditions::set(&mut status.conditions, READY, ready >= wanted, "Replicas", message, generation);
            }
        }
        status.replicas = members.len() as u32;
        status.ready_replicas = members.iter().filter(|(_, r)| *r).count() as u32;
        status.sandboxes = {
            let mut names: Vec<String> = members.iter().map(|(k, _)| k.name.clone()).collect();
            names.sort();
            names
        };
        status
    }

    /// A deleted pool takes its unclaimed sandboxes with it; claimed ones stay with
    /// their claimers.
    pub(super) fn drain_pool(&self, key: &Key) {
        let members = crate::dir::pools::members(
            self.lock().resources.iter().map(|(k, e)| (k, &e.object)),
            &key.namespace,
            &key.name,
        );
        for (member, _) in members {
            self.mark_deleted(&member);
            self.queue.add(member);
        }
    }
}
