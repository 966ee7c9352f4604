//! What every op of a pass reads besides its data: the kernel tier, the
//! pass's numerics ([`Mode`]) and the model's numbers.

use kernels::{KernelTable, Mode};

use super::config::ModelConfig;

#[derive(Clone, Copy, Debug)]
pub struct Cx<'a> {
    pub kt: &'a KernelTable,
    pub mode: Mode,
    pub cfg: &'a ModelConfig,
}
