//! A slab of pending operations named by small integer tokens.

pub struct Slab<T> {
    entries: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { entries: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, value: T) -> u64 {
        match self.free.pop() {
            Some(index) => {
                debug_assert!(self.entries[index as usize].is_none());
                self.entries[index as usize] = Some(value);
                index as u64
            }
            None => {
                self.entries.push(Some(value));
                (self.entries.len() - 1) as u64
            }
        }
    }

    /// Takes the entry of `token`; `None` for an unknown or already taken token.
    pub fn take(&mut self, token: u64) -> Option<T> {
        let value = self.entries.get_mut(token as usize)?.take()?;
        self.free.push(token as u32);
        Some(value)
    }

    /// Entries held (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_reused_and_taken_once() {
        let mut slab = Slab::default();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.take(a), Some("a"));
        assert_eq!(slab.take(a), None);
        let c = slab.insert("c");
        assert_eq!(c, a, "a freed token is reused");
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.take(b), Some("b"));
        assert_eq!(slab.take(99), None);
    }
}
