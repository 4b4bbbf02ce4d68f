//! The operations the host routes, as typed values.
//!
//! The host used to route a string (`"remember"`) to the plugin that listed it, and the plugin
//! matched the same string again to pick a request type: the name lived in the HTTP handler,
//! the route table and the plugin's `match`, and a typo in any of them was a runtime 400. Now
//! an operation is an [`Operation`] and a request a [`Request`] holding its typed body, so the
//! route table is keyed by the enum and the plugin's `match` is exhaustive. The name of each
//! operation exists once, in [`Operation::name`], for logs and for callers that speak names
//! and JSON ([`Request::parse`]: tests, and hosts embedding scopemem without HTTP).

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::PluginError;
use crate::memory::consolidation::HostAnswer;
use crate::memory::feedback::{FeedbackRequest, NewMemory};
use crate::memory::working::MessageEvent;
use crate::memory::{
    BrowseRequest, ForgetRequest, PeopleRequest, PersonRequest, RecallRequest, RememberRequest,
    UpdateRequest,
};

/// Declares [`Operation`], its name for each variant, and [`Operation::ALL`] from one list, so
/// an operation cannot be left out of `ALL` (the host's route table and the memory plugin's
/// operation list come from it) or lack a name.
macro_rules! operations {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// What a plugin can be asked to do.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Operation {
            $($variant),*
        }

        impl Operation {
            /// Every operation, in the order the memory plugin documents them.
            pub const ALL: &'static [Operation] = &[$(Operation::$variant),*];

            /// The operation's name in logs and in [`Request::parse`].
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Operation::$variant => $name),*
                }
            }
        }
    };
}

operations! {
    Remember => "remember",
    Recall => "recall",
    Status => "status",
    Feedback => "feedback",
    FeedbackStatus => "feedback_status",
    Forget => "forget",
    OnLlmRequest => "on_llm_request",
    AfterMessageSent => "after_message_sent",
    OnMessage => "on_message",
    ConsolidationNext => "consolidation_next",
    ConsolidationAnswer => "consolidation_answer",
    Browse => "browse",
    Update => "update",
    ScopeMap => "scope_map",
    PeopleList => "people_list",
    PeopleBrowse => "people_browse",
    PeopleForget => "people_forget",
}

impl Operation {
    /// The operation called `name`, if any.
    pub(crate) fn from_name(name: &str) -> Option<Operation> {
        Operation::ALL.iter().copied().find(|op| op.name() == name)
    }
}

/// One request: an operation with its typed body.
#[derive(Debug)]
pub enum Request {
    Remember(RememberRequest),
    Recall(RecallRequest),
    Status,
    Feedback(FeedbackRequest),
    FeedbackStatus(JobQuery),
    Forget(ForgetRequest),
    OnLlmRequest(LlmRequestEvent),
    AfterMessageSent(AfterMessageSent),
    /// Any message of a chat, for the working memory.
    OnMessage(MessageEvent),
    /// The next due consolidation pass, for the host's own LLM.
    ConsolidationNext,
    /// The host LLM's answer to a pass.
    ConsolidationAnswer(HostAnswer),
    Browse(BrowseRequest),
    Update(UpdateRequest),
    ScopeMap,
    /// The members whose rows a chat may read, with counts.
    PeopleList(PeopleRequest),
    /// What a chat may recall that one member said or that is about them.
    PeopleBrowse(PersonRequest),
    /// Forget one member everywhere on their platform.
    PeopleForget(PersonRequest),
}

impl Request {
    pub(crate) fn operation(&self) -> Operation {
        match self {
            Request::Remember(_) => Operation::Remember,
            Request::Recall(_) => Operation::Recall,
            Request::Status => Operation::Status,
            Request::Feedback(_) => Operation::Feedback,
            Request::FeedbackStatus(_) => Operation::FeedbackStatus,
            Request::Forget(_) => Operation::Forget,
            Request::OnLlmRequest(_) => Operation::OnLlmRequest,
            Request::AfterMessageSent(_) => Operation::AfterMessageSent,
            Request::OnMessage(_) => Operation::OnMessage,
            Request::ConsolidationNext => Operation::ConsolidationNext,
            Request::ConsolidationAnswer(_) => Operation::ConsolidationAnswer,
            Request::Browse(_) => Operation::Browse,
            Request::Update(_) => Operation::Update,
            Request::ScopeMap => Operation::ScopeMap,
            Request::PeopleList(_) => Operation::PeopleList,
            Request::PeopleBrowse(_) => Operation::PeopleBrowse,
            Request::PeopleForget(_) => Operation::PeopleForget,
        }
    }

    /// The request for operation `name` with the JSON body `payload`: `unknown_operation`
    /// for a name no operation has, `invalid_input` for a body of the wrong shape.
    pub(crate) fn parse(name: &str, payload: Value) -> Result<Request, PluginError> {
        let Some(operation) = Operation::from_name(name) else {
            return Err(PluginError::bad_request(
                "unknown_operation",
                format!("no plugin serves '{name}'"),
            ));
        };
        Ok(match operation {
            Operation::Remember => Request::Remember(body(payload)?),
            Operation::Recall => Request::Recall(body(payload)?),
            Operation::Status => Request::Status,
            Operation::Feedback => Request::Feedback(body(payload)?),
            Operation::FeedbackStatus => Request::FeedbackStatus(body(payload)?),
            Operation::Forget => Request::Forget(body(payload)?),
            Operation::OnLlmRequest => Request::OnLlmRequest(body(payload)?),
            Operation::AfterMessageSent => Request::AfterMessageSent(body(payload)?),
            Operation::OnMessage => Request::OnMessage(body(payload)?),
            Operation::ConsolidationNext => Request::ConsolidationNext,
            Operation::ConsolidationAnswer => Request::ConsolidationAnswer(body(payload)?),
            Operation::Browse => Request::Browse(body(payload)?),
            Operation::Update => Request::Update(body(payload)?),
            Operation::ScopeMap => Request::ScopeMap,
            Operation::PeopleList => Request::PeopleList(body(payload)?),
            Operation::PeopleBrowse => Request::PeopleBrowse(body(payload)?),
            Operation::PeopleForget => Request::PeopleForget(body(payload)?),
        })
    }
}

/// A JSON body as `T`; a wrong shape is the caller's error (`invalid_input`, 400).
pub(crate) fn body<T: DeserializeOwned>(payload: Value) -> Result<T, PluginError> {
    serde_json::from_value(payload)
        .map_err(|e| PluginError::bad_request("invalid_input", e.to_string()))
}

/// `feedback_status`: which job.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobQuery {
    pub job_id: String,
}

/// `on_llm_request`: what the framework sends before an LLM call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmRequestEvent {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
    pub query: String,
    #[serde(default)]
    pub entities: Vec<String>,
    /// The host's IANA time zone, for time words in the query (`recall.timezone` otherwise).
    #[serde(default)]
    pub timezone: Option<String>,
    /// The conversation's earlier turns, oldest first, searched with beside the query
    /// (`memory::turns`).
    #[serde(default)]
    pub history: Vec<crate::memory::turns::Turn>,
    /// A preview of the injection (the AstrBot dashboard's "Try as the bot"): the same block,
    /// but no prompt follows, so it does not count toward the threshold rule.
    #[serde(default)]
    pub preview: bool,
    /// The asking member's sender id: a question in the first person lifts what they said and
    /// what is about them (`memory::asker`).
    #[serde(default)]
    pub sender_id: Option<String>,
}

/// The reflection result: the feedback body without conversation or persona, which come
/// from the event itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reflection {
    #[serde(default)]
    pub useful_memory_ids: Vec<String>,
    #[serde(default)]
    pub new_memories: Vec<NewMemory>,
    #[serde(default)]
    pub merge_groups: Vec<Vec<String>>,
}

/// `after_message_sent`. The user message and bot reply are accepted for framework
/// compatibility but never stored: only the reflection result becomes memory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfterMessageSent {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default, rename = "user_message")]
    _user_message: String,
    #[serde(default, rename = "bot_reply")]
    _bot_reply: String,
    #[serde(default, rename = "recalled_memory_ids")]
    _recalled_memory_ids: Vec<String>,
    #[serde(default)]
    pub reflection: Option<Reflection>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_operation_round_trips_through_its_name_and_parses_into_its_request() {
        let mut names = std::collections::HashSet::new();
        for &op in Operation::ALL {
            assert!(names.insert(op.name()), "{} named twice", op.name());
            assert_eq!(Operation::from_name(op.name()), Some(op));
            // Parsing names the variant's own request (an empty body is refused or accepted,
            // never routed to another operation).
            if let Ok(request) = Request::parse(op.name(), json!({})) {
                assert_eq!(request.operation(), op);
            }
        }
        assert_eq!(Operation::from_name("Remember"), None);
    }

    #[test]
    fn a_named_request_is_parsed_into_its_type_or_refused_with_the_callers_error() {
        let r = Request::parse("recall", json!({"conversation_id": "c:1", "query": "q"}));
        assert!(matches!(r, Ok(Request::Recall(ref q)) if q.query == "q"));
        let e = Request::parse("forgets", json!({})).unwrap_err();
        assert_eq!(e.code, "unknown_operation");
        let e = Request::parse("feedback_status", json!({"job": "x"})).unwrap_err();
        assert_eq!((e.code, e.is_client_error()), ("invalid_input", true));
        assert!(matches!(
            Request::parse("status", Value::Null),
            Ok(Request::Status)
        ));
    }
}
