//! `agentplane send` and `agentplane reply`: talking to a Session by appending to its
//! `spec.messages` or `spec.replies` in the user's own file, the single source of what
//! the Session is. The edit is textual and minimal (one list item added), and the
//! result must parse to the same resources with exactly that item more before it is
//! written.

use agentplane_controller::dir::parse::{Key, Kind, Object, parse_file};
use agentplane_crds::{PermissionDecision, Reply};
use anyhow::bail;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::workspace::{Declaration, DirArgs, Workspace, not_found, parse_one, ref_name, write_atomically};
use crate::yaml_edit;

#[derive(Args, Debug)]
pub struct SendArgs {
    /// session/NAME (or NAME).
    session: String,
    /// What to say; appended to spec.messages.
    text: String,
    /// The namespace of the resource.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    dir: DirArgs,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("reply").required(true).args(["decision", "answer", "reject"]))]
pub struct ReplyArgs {
    /// session/NAME (or NAME).
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
    /// The namespace of the resource.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    dir: DirArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DecisionArg {
    Once,
    Always,
    Reject,
}

pub async fn send(args: SendArgs) -> anyhow::Result<i32> {
    let workspace = Workspace::new(&args.dir);
    let key = Key { kind: Kind::Session, namespace: args.namespace.clone(), name: parse_one(std::slice::from_ref(&args.session), Kind::Session)? };
    let declaration = workspace.declaration(&key)?.ok_or_else(|| not_found(&key))?;
    let count = append(&declaration, "messages", &args.text, |session| {
        session.spec.messages.push(args.text.clone());
        session.spec.messages.len()
    })?;
    println!("{}: message {count} added to {}", ref_name(&key), declaration.file);
    Ok(0)
}

pub async fn reply(args: ReplyArgs) -> anyhow::Result<i32> {
    let workspace = Workspace::new(&args.dir);
    let key = Key { kind: Kind::Session, namespace: args.namespace.clone(), name: parse_one(std::slice::from_ref(&args.session), Kind::Session)? };
    let declaration = workspace.declaration(&key)?.ok_or_else(|| not_found(&key))?;
    let answers = if args.answer.is_empty() {
        Vec::new()
    } else {
        // One multi-select question takes all the options chosen; else one answer each.
        let asked = match workspace.record(&key).ok().flatten() {
            Some(Object::Session(s)) => s.status.and_then(|st| st.pending_questions.into_iter().find(|q| q.id == args.id)).map(|q| q.questions),
            _ => None,
        };
        match asked {
            Some(questions) if questions.len() == 1 && questions[0].multi_select => vec![args.answer.clone()],
            Some(questions) if questions.len() != args.answer.len() => {
                bail!("{} asks {} question{}: give one --answer each", args.id, questions.len(), if questions.len() == 1 { "" } else { "s" })
            }
            _ => args.answer.iter().map(|a| vec![a.clone()]).collect(),
        }
    };
    let decision = args.decision.map(|d| match d {
        DecisionArg::Once => PermissionDecision::Once,
        DecisionArg::Always => PermissionDecision::Always,
        DecisionArg::Reject => PermissionDecision::Reject,
    });
    let reply = Reply { id: args.id.clone(), decision, answers, reject: args.reject };
    let count = append(&declaration, "replies", &reply, |session| {
        session.spec.replies.push(reply.clone());
        session.spec.replies.len()
    })?;
    println!("{}: reply {count} ({}) added to {}", ref_name(&key), args.id, declaration.file);
    Ok(0)
}

/// Appends `item` to `spec.<list>` of the declared Session, checking that the edited
/// file declares what `expect` makes of the Session and everything else unchanged.
fn append<T: Serialize>(
    declaration: &Declaration,
    list: &str,
    item: &T,
    expect: impl FnOnce(&mut agentplane_crds::Session) -> usize,
) -> anyhow::Result<usize> {
    let refuse = |why: String| {
        anyhow::anyhow!("{}: {why}; nothing was changed: add the item to spec.{list} by hand", declaration.file)
    };
    let this = declaration.this();
    let documents = yaml_edit::documents(&declaration.text).map_err(|e| refuse(e.0))?;
    let document = documents
        .iter()
        .find(|d| d.line() == this.line)
        .ok_or_else(|| refuse(format!("its documents cannot be told apart at line {}", this.line)))?;
    let edited = yaml_edit::append_to_spec_list(&declaration.text, document, list, item).map_err(|e| refuse(e.0))?;

    let mut expected: Vec<Object> = declaration.declared.iter().map(|d| d.object.clone()).collect();
    let Object::Session(session) = &mut expected[declaration.index] else { bail!("{} is not a Session", this.object.key()) };
    let count = expect(session);
    let reparsed = parse_file(&declaration.file, &edited).map_err(|e| refuse(format!("the edit would not parse ({e})")))?;
    if reparsed.into_iter().map(|d| d.object).collect::<Vec<_>>() != expected {
        return Err(refuse("the edit would not read back as intended".into()));
    }
    write_atomically(&declaration.path, edited.as_bytes())?;
    Ok(count)
}
