//! Request fields as the dialects' `#[derive(Deserialize)]` types hold them:
//! a [`Field`] takes any JSON value, so a field of the wrong type is not a
//! serde error but a 400 naming the field, with the server's own message
//! (`'temperature' must be a number`). Unknown fields are ignored.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::error::ApiError;

/// One field of a request: absent (or `null`), a value of its type, or a
/// value of another type.
#[derive(Clone, Debug, Default)]
pub enum Field<T> {
    #[default]
    Absent,
    Given(T),
    Wrong(Value),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Null => Field::Absent,
            v => match T::deserialize(&v) {
                Ok(t) => Field::Given(t),
                Err(_) => Field::Wrong(v),
            },
        })
    }
}

impl<T> Field<T> {
    /// The value, `None` when absent; a field of the wrong type is a 400
    /// naming `name`, saying it `must` be something.
    pub fn get(self, name: &str, must: &str) -> Result<Option<T>, ApiError> {
        match self {
            Field::Absent => Ok(None),
            Field::Given(t) => Ok(Some(t)),
            Field::Wrong(_) => Err(ApiError::field(name, format!("'{name}' must be {must}"))),
        }
    }

    pub fn is_given(&self) -> bool {
        !matches!(self, Field::Absent)
    }
}

/// An integer as JSON carries it: any integer up to `u64`'s range (taken as
/// `i64`, as the server always has), not a fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int(pub i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Number::deserialize(d) {
            Ok(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Ok(Int(i)),
                (None, Some(u)) => Ok(Int(u as i64)),
                _ => Err(serde::de::Error::custom("not an integer")),
            },
            Err(e) => Err(e),
        }
    }
}

/// A request body as the dialect's type: a body that is not JSON, or not
/// an object, is a 400.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let v = match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Err(ApiError::bad("the request body must be a JSON object")),
        Err(e) => {
            return Err(ApiError::bad(format!(
                "the request body is not valid JSON: {e}"
            )))
        }
    };
    // Every field is a `Field`, which takes any value: this cannot fail.
    T::deserialize(v).map_err(|e| ApiError::bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Default, Debug)]
    #[serde(default)]
    struct R {
        n: Field<Int>,
        s: Field<String>,
        b: Field<bool>,
    }

    #[test]
    fn fields_take_any_value_and_name_themselves_when_wrong() {
        let r: R = parse(br#"{"n": 18446744073709551615, "s": "x", "other": [1]}"#).unwrap();
        assert_eq!(r.n.get("n", "an integer").unwrap(), Some(Int(-1)));
        assert_eq!(r.s.get("s", "a string").unwrap().as_deref(), Some("x"));
        assert_eq!(r.b.get("b", "a boolean").unwrap(), None);
        let r: R = parse(br#"{"n": 1.5, "b": "yes"}"#).unwrap();
        let e = r.n.get("n", "an integer").unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("n")));
        assert_eq!(e.message, "'n' must be an integer");
        assert!(r.b.get("b", "a boolean").is_err());
        assert_eq!(parse::<R>(b"[1]").unwrap_err().status, 400);
        assert_eq!(parse::<R>(b"{x").unwrap_err().status, 400);
    }
}
