//! `agentplane send` and `agentplane reply`: talking to a Session by appending to its
//! `spec.messages` or `spec.replies`. In the directory store that is the user's own
//! file, the single source of what the Session is: the edit is textual and minimal
//! (one list item added), and the result must parse to the same resources with
//! exactly that item more before it is written. In a cluster it is a JSON patch that
//! only applies to the version it was made from.

use agentplane_crds::{Key, Kind};
use agentplane_crds::{PermissionDecision, Reply, SessionStatus};
use anyhow::bail;
use clap::{Args, ValueEnum};

use crate::resources::{SpecItem, parse_one, ref_name};
use crate::store::{Store, StoreArgs};

#[derive(Args, Debug)]
pub struct SendArgs {
    /// session/NAME (or NAME).
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    session: String,
    /// What to say; appended to spec.messages.
    text: String,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("reply").required(true).args(["decision", "answer", "reject"]))]
pub struct ReplyArgs {
    /// session/NAME (or NAME).
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    session: String,
    /// The id of the question or permission request (`agentplane describe session NAME`).
    id: String,
    /// For a permission request.
    #[arg(long, value_enum)]
    decision: Option<DecisionArg>,
    /// For a question: once per question asked, in order (for a single multi-select
    /// question, once per option chosen).
    #[arg(long)]
    answer: Vec<String>,
    /// Decline to answer the question.
    #[arg(long)]
    reject: bool,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DecisionArg {
    Once,
    Always,
    Reject,
}

pub async fn send(args: SendArgs) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let key = session_key(&store, args.namespace.as_deref(), &args.session)?;
    let (count, file) = store.append(&key, &SpecItem::Message(args.text.clone())).await?;
    println!("{}: message {count} added{}", ref_name(&key), written_to(file));
    Ok(0)
}

pub async fn reply(args: ReplyArgs) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let key = session_key(&store, args.namespace.as_deref(), &args.session)?;
    let status = store.session(&key).await?.and_then(|s| s.status);
    let answers = answers(&args.id, &args.answer, status.as_ref())?;
    let decision = args.decision.map(|d| match d {
        DecisionArg::Once => PermissionDecision::Once,
        DecisionArg::Always => PermissionDecision::Always,
        DecisionArg::Reject => PermissionDecision::Reject,
    });
    let reply = Reply { id: args.id.clone(), decision, answers, reject: args.reject };
    let (count, file) = store.append(&key, &SpecItem::Reply(reply)).await?;
    println!("{}: reply {count} ({}) added{}", ref_name(&key), args.id, written_to(file));
    Ok(0)
}

fn session_key(store: &Store, namespace: Option<&str>, word: &str) -> anyhow::Result<Key> {
    let name = parse_one(&[word.to_string()], Kind::Session)?;
    Ok(Key { kind: Kind::Session, namespace: store.namespace(namespace), name })
}

fn written_to(file: Option<String>) -> String {
    file.map(|file| format!(" to {file}")).unwrap_or_default()
}

/// The answers of a reply as the Session takes them: one multi-select question takes
/// all the options chosen; else one answer each question.
fn answers(id: &str, given: &[String], status: Option<&SessionStatus>) -> anyhow::Result<Vec<Vec<String>>> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let asked = status.and_then(|st| st.pending_questions.iter().find(|q| q.id == id)).map(|q| &q.questions);
    match asked {
        Some(questions) if questions.len() == 1 && questions[0].multi_select => Ok(vec![given.to_vec()]),
        Some(questions) if questions.len() != given.len() => {
            bail!(
                "{id} asks {} question{}: give one --answer each",
                questions.len(),
                if questions.len() == 1 { "" } else { "s" }
            )
        }
        _ => Ok(given.iter().map(|a| vec![a.clone()]).collect()),
    }
}
