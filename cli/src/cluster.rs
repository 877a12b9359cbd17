//! The cluster store: the resources of a Kubernetes cluster, read and changed through
//! its API server with the user's kubeconfig, and the node agent of each found
//! through its Sandbox and the Secret holding that node agent's token.

use std::path::Path;

use agentplane_controller::restart::RESTARTED_AT;
use agentplane_crds::{API_VERSION, Key, Kind, Object};
use agentplane_crds::{Process, Sandbox, SecretKeySelector, Session};
use agentplane_node_agent::client::Client;
use anyhow::{Context, anyhow, bail};
use futures_util::StreamExt;
use futures_util::stream::LocalBoxStream;
use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};

use crate::resources::{Change, Events, Selection, SpecItem, kind_word, not_found, ref_name};

/// An append that loses the race to another writer is made again on the newer
/// version: this many times, not forever, when the Session never holds still.
const APPEND_ATTEMPTS: usize = 20;

pub struct Cluster {
    client: kube::Client,
    /// The kubeconfig context's namespace.
    namespace: String,
    /// The API server's URL, for errors.
    server: String,
    /// Where it looks, for "not found": the kubeconfig and its context.
    place: String,
}

impl Cluster {
    pub async fn connect(kubeconfig: &Path, context: Option<&str>) -> anyhow::Result<Cluster> {
        // The loader's errors name the file already.
        let config = crate::kubeconfig::load(Some(kubeconfig), context).await?;
        let namespace = config.default_namespace.clone();
        let server = config.cluster_url.to_string();
        let client = kube::Client::try_from(config)
            .with_context(|| format!("a client of the Kubernetes API server at {server}"))?;
        let place = match context {
            Some(context) => format!("in the cluster of {} (context {context})", kubeconfig.display()),
            None => format!("in the cluster of {}", kubeconfig.display()),
        };
        Ok(Cluster { client, namespace, server, place })
    }

    /// "Not found", saying in which cluster it was looked for.
    fn not_found(&self, key: &Key) -> anyhow::Error {
        anyhow!("{}, {}", not_found(key), self.place)
    }

    pub fn default_namespace(&self) -> &str {
        &self.namespace
    }

    fn api(&self, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = match kind {
            Kind::Process => ApiResource::erase::<Process>(&()),
            Kind::Session => ApiResource::erase::<Session>(&()),
            Kind::Sandbox => ApiResource::erase::<Sandbox>(&()),
            Kind::SandboxTemplate => ApiResource::erase::<agentplane_crds::SandboxTemplate>(&()),
            Kind::SandboxWarmPool => ApiResource::erase::<agentplane_crds::SandboxWarmPool>(&()),
        };
        match namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Creates the resource; refused (409) when it exists.
    pub async fn create(&self, object: &Object) -> anyhow::Result<()> {
        let key = object.key();
        let value: DynamicObject = serde_json::from_value(object.to_json())?;
        self.api(key.kind, Some(&key.namespace))
            .create(&kube::api::PostParams::default(), &value)
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    pub async fn get(&self, key: &Key) -> anyhow::Result<Object> {
        let found = self.api(key.kind, Some(&key.namespace)).get_opt(&key.name).await.map_err(|e| self.error(e))?;
        to_object(key.kind, found.ok_or_else(|| self.not_found(key))?)
    }

    /// The resources of `kind` (in `namespace`, or all), sorted.
    pub async fn list(&self, kind: Kind, namespace: Option<&str>) -> anyhow::Result<Vec<Object>> {
        let list = self.api(kind, namespace).list(&ListParams::default()).await.map_err(|e| match e {
            kube::Error::Api(status) if status.is_not_found() => anyhow!(
                "the Kubernetes API server at {} does not serve {}.{}: are the agentplane CRDs installed?",
                self.server,
                kind.plural(),
                agentplane_crds::GROUP
            ),
            e => self.error(e),
        })?;
        let mut objects: Vec<Object> = list.items.into_iter().filter_map(|o| readable(kind, o)).collect();
        objects.sort_by_key(Object::key);
        Ok(objects)
    }

    /// kube-runtime's watcher on the selection: a complete list whenever it (re)lists,
    /// then each change; it reconnects with backoff when the connection is lost.
    pub fn watch(&self, selection: &Selection) -> LocalBoxStream<'static, Change> {
        let kind = selection.kind;
        let mut config = watcher::Config::default();
        if let Some(name) = &selection.name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        let mut listed = Vec::new();
        watcher(self.api(kind, selection.scope()), config)
            .default_backoff()
            .filter_map(move |event| {
                let change = match event {
                    Ok(watcher::Event::Init) => {
                        listed.clear();
                        None
                    }
                    Ok(watcher::Event::InitApply(object)) => {
                        listed.extend(readable(kind, object));
                        None
                    }
                    Ok(watcher::Event::InitDone) => {
                        listed.sort_by_key(Object::key);
                        Some(Change::All(std::mem::take(&mut listed)))
                    }
                    Ok(watcher::Event::Apply(object)) => readable(kind, object).map(|o| Change::Applied(Box::new(o))),
                    Ok(watcher::Event::Delete(object)) => readable(kind, object).map(|o| Change::Deleted(o.key())),
                    Err(error) => {
                        eprintln!("warning: watching {}: {error} (trying again)", kind.plural());
                        None
                    }
                };
                std::future::ready(change)
            })
            .boxed_local()
    }

    /// The Events about `object`, oldest first, as `kubectl describe` finds them.
    pub async fn events(&self, object: &Object) -> Events {
        let Some(uid) = &object.meta().uid else { return Events::Listed(Vec::new()) };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &object.key().namespace);
        let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
        match api.list(&params).await {
            Ok(list) => {
                let mut events = list.items;
                events.sort_by_key(|e| event_time(e).map(|t| t.0));
                Events::Listed(events)
            }
            Err(kube::Error::Api(status)) if status.is_forbidden() => {
                Events::Unavailable("not allowed to list events".into())
            }
            Err(error) => Events::Unavailable(format!("{:#}", self.error(error))),
        }
    }

    /// The node agent of the Sandbox a Process or Session names, with the token its
    /// Secret holds.
    pub async fn node_agent(&self, object: &Object) -> anyhow::Result<Client> {
        let owner = object.key();
        let key =
            Key { kind: Kind::Sandbox, namespace: owner.namespace.clone(), name: sandbox_name(object).to_string() };
        let sandboxes: Api<Sandbox> = Api::namespaced(self.client.clone(), &key.namespace);
        let Some(sandbox) = sandboxes.get_opt(&key.name).await.map_err(|e| self.error(e))? else {
            bail!(
                "{} runs on sandbox {:?}, which is not found in namespace {:?}",
                ref_name(&owner),
                key.name,
                key.namespace
            )
        };
        let Some(endpoint) = sandbox.endpoint().map(str::trim).filter(|e| !e.is_empty()) else {
            bail!(
                "{} has no endpoint yet (spec.endpoint, or status.endpoint once the controller started it): there is no node agent to ask",
                ref_name(&key)
            );
        };
        let token = match &sandbox.spec.token_secret_ref {
            Some(selector) => Some(self.token(&key, selector).await?),
            None => None,
        };
        Client::new(endpoint, token).with_context(|| format!("the node agent of {}", ref_name(&key)))
    }

    async fn token(&self, sandbox: &Key, selector: &SecretKeySelector) -> anyhow::Result<String> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &sandbox.namespace);
        let whose = format!("the node agent token of {}", ref_name(sandbox));
        let Some(secret) = secrets.get_opt(&selector.name).await.map_err(|e| self.error(e))? else {
            bail!("secret {:?} ({whose}) not found in namespace {:?}", selector.name, sandbox.namespace)
        };
        let Some(value) = secret.data.and_then(|mut data| data.remove(&selector.key)) else {
            bail!("secret {:?} has no key {:?} ({whose})", selector.name, selector.key)
        };
        String::from_utf8(value.0)
            .map_err(|_| anyhow!("secret {:?} key {:?} ({whose}) is not text", selector.name, selector.key))
    }

    /// Appends `item` to the Session's `spec.<list>` with a JSON patch that only
    /// applies to the version it was made from, so that concurrent appends each land
    /// (one of them again, on the newer version); returns the list's new length.
    pub async fn append(&self, key: &Key, item: &SpecItem) -> anyhow::Result<usize> {
        let sessions: Api<Session> = Api::namespaced(self.client.clone(), &key.namespace);
        // The version a patch was refused at: refused again there, it was not a race.
        let mut refused_at: Option<String> = None;
        for _ in 0..APPEND_ATTEMPTS {
            let session =
                sessions.get_opt(&key.name).await.map_err(|e| self.error(e))?.ok_or_else(|| self.not_found(key))?;
            item.check_answers(&session)?;
            let version = session.metadata.resource_version.clone().unwrap_or_default();
            let count = item.count(&session.spec);
            let patch = Patch::Json::<()>(serde_json::from_value(append_patch(&version, item, count))?);
            match sessions.patch(&key.name, &PatchParams::default(), &patch).await {
                Ok(_) => return Ok(count + 1),
                // A failed `test` is 422; a write that lost inside the API server, 409.
                Err(kube::Error::Api(status))
                    if (status.is_conflict() || status.is_invalid())
                        && refused_at.as_deref() != Some(version.as_str()) =>
                {
                    refused_at = Some(version);
                }
                Err(error) => return Err(self.error(error)),
            }
        }
        bail!(
            "{} kept changing: {APPEND_ATTEMPTS} attempts to add to spec.{} lost the race; try again",
            ref_name(key),
            item.list()
        )
    }

    /// Asks the controller to restart the resource: the annotation `restartedAt` set
    /// to `at`, as `kubectl rollout restart` does (see `agentplane_controller::restart`).
    pub async fn request_restart(&self, key: &Key, at: &str) -> anyhow::Result<Object> {
        let patch = serde_json::json!({"metadata": {"annotations": {RESTARTED_AT: at}}});
        let api = self.api(key.kind, Some(&key.namespace));
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(object) => to_object(key.kind, object),
            Err(kube::Error::Api(status)) if status.is_not_found() => Err(self.not_found(key)),
            Err(error) => Err(self.error(error)),
        }
    }

    fn error(&self, error: kube::Error) -> anyhow::Error {
        match error {
            // The API server's own words name the resource, and for a refusal the user and the verb.
            kube::Error::Api(status) if !status.message.is_empty() => anyhow!("{}", status.message),
            kube::Error::Api(status) => anyhow!("the Kubernetes API server answered {} {}", status.code, status.reason),
            kube::Error::HyperError(_) | kube::Error::Service(_) => {
                anyhow::Error::new(error).context(format!("cannot reach the Kubernetes API server at {}", self.server))
            }
            other => anyhow::Error::new(other).context(format!("the Kubernetes API server at {}", self.server)),
        }
    }
}

/// `test` the version, then `add` the item (or the list, when there is none yet: a
/// list that is there but empty is replaced, which is the same).
fn append_patch(version: &str, item: &SpecItem, count: usize) -> serde_json::Value {
    let list = item.list();
    let add = if count == 0 {
        serde_json::json!({"op": "add", "path": format!("/spec/{list}"), "value": [item]})
    } else {
        serde_json::json!({"op": "add", "path": format!("/spec/{list}/-"), "value": item})
    };
    let test = serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": version});
    serde_json::json!([test, add])
}

/// Where the store placed it: a sandbox claimed from a template is in its status, as
/// the directory store reads it too.
fn sandbox_name(object: &Object) -> &str {
    match object {
        Object::Process(process) => process.placed_sandbox(),
        Object::Session(session) => session.placed_sandbox(),
        Object::Sandbox(sandbox) => sandbox.metadata.name.as_deref().unwrap_or_default(),
        // Not run anywhere: the caller asks only of what runs.
        Object::SandboxTemplate(_) | Object::SandboxWarmPool(_) => "",
    }
}

fn to_object(kind: Kind, object: DynamicObject) -> anyhow::Result<Object> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let mut json = serde_json::to_value(object)?;
    // List items may come without their type.
    if let Some(fields) = json.as_object_mut() {
        fields.insert("apiVersion".into(), API_VERSION.into());
        fields.insert("kind".into(), kind.as_str().into());
    }
    Object::from_json(json).map_err(|e| anyhow!("{}/{name} cannot be read: {e}", kind_word(kind)))
}

/// An object this CLI cannot read is reported and skipped: the others are still worth showing.
fn readable(kind: Kind, object: DynamicObject) -> Option<Object> {
    to_object(kind, object).map_err(|e| eprintln!("warning: {e:#}")).ok()
}

/// When an event last happened, whichever of its times its reporter set.
pub fn event_time(event: &Event) -> Option<Time> {
    event
        .last_timestamp
        .clone()
        .or_else(|| event.event_time.as_ref().map(|t| Time(t.0)))
        .or_else(|| event.first_timestamp.clone())
        .or_else(|| event.metadata.creation_timestamp.clone())
}
