//! One chat-completions call to an OpenAI-compatible endpoint (`consolidation.llm_*`): a system
//! and a user message in, the assistant's text out. No retries: a failed pass writes nothing,
//! and the conversation's next pass reads the same messages again.

use std::time::Duration;

use serde_json::{json, Value};

use crate::config::Secret;

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("the chat endpoint did not answer in time")]
    Timeout,
    #[error("the chat endpoint could not be reached: {0}")]
    Unreachable(String),
    #[error("the chat endpoint answered HTTP {0}")]
    Status(u16),
    #[error("the chat endpoint's answer has no message text")]
    NoText,
}

pub struct ChatClient {
    client: reqwest::Client,
    url: String,
    model: String,
    key: Option<Secret>,
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatClient")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl ChatClient {
    /// The client for `consolidation.*`, or `None` when no base URL is set.
    pub(crate) fn from_config(
        c: &crate::config::ConsolidationConfig,
    ) -> Result<Option<ChatClient>, ChatError> {
        if c.llm_base_url.is_empty() {
            return Ok(None);
        }
        let timeout = Duration::from_secs(c.timeout_secs.max(1));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| ChatError::Unreachable(e.to_string()))?;
        Ok(Some(ChatClient {
            client,
            url: format!("{}/chat/completions", c.llm_base_url),
            model: c.llm_model.clone(),
            key: c.llm_api_key.clone(),
        }))
    }

    /// The assistant's answer to `system` + `user`, at temperature 0.
    /// The model's answer to `user` under `system`, with the tokens the provider says it spent
    /// (`usage`), when it says.
    pub(crate) async fn complete(
        &self,
        system: &str,
        user: &str,
    ) -> Result<(String, Option<super::budget::Usage>), ChatError> {
        let body = json!({
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(sent_error)?;
        let status = response.status();
        if !status.is_success() {
            return Err(ChatError::Status(status.as_u16()));
        }
        let answer: Value = response.json().await.map_err(sent_error)?;
        let usage = serde_json::from_value(answer["usage"].clone()).ok();
        let text = answer["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .ok_or(ChatError::NoText)?;
        Ok((text, usage))
    }
}

fn sent_error(e: reqwest::Error) -> ChatError {
    if e.is_timeout() {
        ChatError::Timeout
    } else if e.is_decode() {
        ChatError::NoText
    } else {
        // The error's text may hold the URL; it is operator config, never a memory or key.
        ChatError::Unreachable(e.without_url().to_string())
    }
}
