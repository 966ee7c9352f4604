//! Tensors derived from a file's (the kernels' repacked copies), held with
//! the file: built in memory, or mapped read-only from a cache file written
//! by an earlier run (shared with every process that maps it).

use std::collections::HashMap;
use std::ops::Range;

use memmap2::Mmap;

/// The derived tensors of one file, by name.
#[derive(Debug, Default)]
pub struct Derived {
    owned: HashMap<String, Vec<u64>>,
    mapped: Option<(Mmap, HashMap<String, Range<usize>>)>,
}

impl Derived {
    /// Tensors built in memory.
    pub fn owned(tensors: HashMap<String, Vec<u64>>) -> Derived {
        Derived {
            owned: tensors,
            mapped: None,
        }
    }

    /// Tensors that lie in `map` at the given byte ranges (each range inside
    /// the map and 8-byte aligned; checked here).
    pub fn mapped(map: Mmap, index: HashMap<String, Range<usize>>) -> Option<Derived> {
        let ok = index
            .values()
            .all(|r| r.start <= r.end && r.end <= map.len() && r.start % 8 == 0);
        ok.then_some(Derived {
            owned: HashMap::new(),
            mapped: Some((map, index)),
        })
    }

    /// The bytes of tensor `name`, if derived.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        if let Some(w) = self.owned.get(name) {
            return Some(bytemuck::cast_slice(w.as_slice()));
        }
        let (map, index) = self.mapped.as_ref()?;
        index.get(name).map(|r| &map[r.clone()])
    }

    pub fn contains(&self, name: &str) -> bool {
        self.owned.contains_key(name)
            || self
                .mapped
                .as_ref()
                .is_some_and(|(_, i)| i.contains_key(name))
    }

    /// The names of the derived tensors (in no order).
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.owned.keys().map(String::as_str).collect();
        if let Some((_, index)) = &self.mapped {
            v.extend(index.keys().map(String::as_str));
        }
        v
    }

    pub fn len(&self) -> usize {
        self.owned.len() + self.mapped.as_ref().map_or(0, |(_, i)| i.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of all derived tensors.
    pub fn bytes(&self) -> usize {
        let owned: usize = self.owned.values().map(|w| w.len() * 8).sum();
        owned
            + self
                .mapped
                .as_ref()
                .map_or(0, |(_, i)| i.values().map(|r| r.len()).sum())
    }

    /// Whether the tensors are mapped from a cache file (not copies in memory).
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// The mapping of a cache file, when the tensors come from one.
    pub fn map(&self) -> Option<&Mmap> {
        self.mapped.as_ref().map(|(m, _)| m)
    }
}
