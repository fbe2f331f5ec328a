//! Interning of label keys and values, so the solver compares `u32`s instead of strings.

use std::collections::HashMap;

/// An interned string (a label key or value, a namespace, a taint key...).
pub type Sym = u32;

/// One table for every string the solver touches; built once per solve.
#[derive(Debug, Default, Clone)]
pub struct Symbols {
    ids: HashMap<String, Sym>,
    names: Vec<String>,
}

impl Symbols {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `s`, adding it if it is new.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = Sym::try_from(self.names.len()).unwrap_or(Sym::MAX);
        self.names.push(s.to_owned());
        self.ids.insert(s.to_owned(), id);
        id
    }

    /// The id of `s` if it was ever interned.
    pub fn get(&self, s: &str) -> Option<Sym> {
        self.ids.get(s).copied()
    }

    /// The string behind an id (empty for an id this table never issued).
    pub fn name(&self, id: Sym) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_reversible() {
        let mut s = Symbols::new();
        let a = s.intern("topology.kubernetes.io/zone");
        let b = s.intern("kr-central-2-a");
        assert_ne!(a, b);
        assert_eq!(s.intern("topology.kubernetes.io/zone"), a);
        assert_eq!(s.name(b), "kr-central-2-a");
        assert_eq!(s.get("missing"), None);
    }
}
