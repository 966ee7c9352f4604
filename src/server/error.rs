//! The server's one error type: a status and a message, rendered as the
//! error object of the dialect the request spoke — OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` or Anthropic's
//! `{"type": "error", "error": {"type", "message"}}` — for every status the
//! server answers with an error: the handlers' own, an unknown route (404),
//! a method a route does not take (405), a body past `--max-body` (413), and
//! (written by [`super::conn`] in place of hyper's empty answer) headers
//! too large (431).

use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Which API's error object a response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's (also llama-server's own endpoints).
    #[default]
    OpenAi,
    /// Anthropic's Messages API (`/v1/messages…`).
    Anthropic,
}

impl Dialect {
    /// The dialect of a request to `path`.
    pub fn of_path(path: &str) -> Dialect {
        if path.starts_with("/v1/messages") {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }
}

/// An error response: an HTTP status, a message, the field at fault.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub param: Option<String>,
    pub dialect: Dialect,
}

/// OpenAI's error object.
#[derive(Serialize)]
struct OpenAiError<'a> {
    error: OpenAiErrorInner<'a>,
}

#[derive(Serialize)]
struct OpenAiErrorInner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: u16,
}

/// Anthropic's error object.
#[derive(Serialize)]
struct AnthropicError<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicErrorInner<'a>,
}

#[derive(Serialize)]
struct AnthropicErrorInner<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

impl ApiError {
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::status(400, message)
    }

    pub fn field(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::status(400, message)
        }
    }

    pub fn status(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            dialect: Dialect::OpenAi,
        }
    }

    /// The same error in `dialect`'s shape.
    pub fn in_dialect(self, dialect: Dialect) -> ApiError {
        ApiError { dialect, ..self }
    }

    /// OpenAI's error type for the status.
    pub fn kind(&self) -> &'static str {
        match self.status {
            400 | 404 | 405 | 408 | 413 | 414 | 431 => "invalid_request_error",
            401 => "authentication_error",
            503 => "unavailable_error",
            _ => "server_error",
        }
    }

    /// Anthropic's error type for the status.
    fn anthropic_kind(&self) -> &'static str {
        match self.status {
            400 | 405 | 408 | 413 | 414 | 431 => "invalid_request_error",
            401 => "authentication_error",
            404 => "not_found_error",
            503 => "overloaded_error",
            _ => "api_error",
        }
    }

    /// The error object as JSON text, in the error's dialect.
    pub fn to_json(&self) -> String {
        let text = match self.dialect {
            Dialect::OpenAi => serde_json::to_string(&OpenAiError {
                error: OpenAiErrorInner {
                    message: &self.message,
                    kind: self.kind(),
                    param: self.param.as_deref(),
                    code: self.status,
                },
            }),
            Dialect::Anthropic => serde_json::to_string(&AnthropicError {
                kind: "error",
                error: AnthropicErrorInner {
                    kind: self.anthropic_kind(),
                    message: &self.message,
                },
            }),
        };
        text.unwrap_or_default()
    }

    /// The error object as a JSON value, in the error's dialect.
    pub fn body(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_json()).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_json();
        let mut r = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        if self.status == 503 {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(self.status, 408 | 413) {
            // The rest of the body is not worth reading: the connection closes.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}

/// The server is stopping: a request it will not answer.
pub fn shutting_down() -> ApiError {
    ApiError::status(503, "the server is shutting down")
}

/// The router's fallback: no such route (404).
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::status(404, "no such endpoint").in_dialect(Dialect::of_path(uri.path()))
}

/// A route that exists, asked with a method it does not take (405).
pub async fn method_not_allowed(uri: Uri) -> ApiError {
    ApiError::status(405, format!("{} does not take this method", uri.path()))
        .in_dialect(Dialect::of_path(uri.path()))
}

/// The whole HTTP/1.1 answer to a request whose head hyper refused before
/// any handler saw it (`status`: 431, headers too large; 414, a target too
/// long), with the error object as its body; the connection then closes.
pub fn raw_answer(status: u16, reason: &str, message: &str) -> Vec<u8> {
    let body = ApiError::status(status, message).to_json();
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_has_its_own_error_object() {
        let e = ApiError::field("temperature", "'temperature' must be a number");
        let v = e.body();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "temperature");
        assert_eq!(v["error"]["code"], 400);
        let a = ApiError::status(404, "no such endpoint").in_dialect(Dialect::Anthropic);
        let v = a.body();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(v["error"]["message"], "no such endpoint");
        assert_eq!(
            Dialect::of_path("/v1/messages/count_tokens"),
            Dialect::Anthropic
        );
        assert_eq!(Dialect::of_path("/v1/chat/completions"), Dialect::OpenAi);
    }

    #[test]
    fn a_raw_answer_is_a_whole_response_with_a_json_body() {
        let r =
            String::from_utf8(raw_answer(431, "Request Header Fields Too Large", "big")).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], 431);
    }
}
