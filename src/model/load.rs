//! Binding a model to a GGUF file: metadata through `ModelConfig`, tensors
//! zero-copy through `WeightRef`s over the file's bytes.

use thiserror::Error;

use crate::gguf::GgufFile;

use super::config::{ConfigError, ModelConfig};
use super::forward::Model;
use super::weights::{WeightError, WeightRef};

#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightError),
}

impl<'a> Model<'a> {
    /// The model stored in `file` (weights borrowed from its mapping).
    pub fn load(file: &'a GgufFile) -> Result<Model<'a>, LoadError> {
        let config = ModelConfig::from_metadata(|k| file.get(k))?;
        let lookup = |name: &str| {
            file.tensor(name).map(|t| WeightRef {
                ty: t.ty,
                dims: t.dims.to_vec(),
                data: t.data,
            })
        };
        Ok(Model::bind(config, &lookup)?)
    }
}
