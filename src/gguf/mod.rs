//! GGUF v3: metadata values, the writer, and (reader.rs) the hostile-input reader.

pub mod value;
pub mod writer;

pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorPlan};
