//! GGUF v3: metadata values, the hostile-input reader, and the streaming writer.

mod derived;
pub mod error;
pub mod pages;
mod parse;
pub mod reader;
pub mod value;
pub mod writer;

pub use derived::Derived;
pub use error::GgufError;
pub use reader::{GgufFile, TensorInfo, TensorView};
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorPlan};
