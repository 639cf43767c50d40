//! A table of objects addressed by small integer handles, with reuse of freed slots.

/// Objects by handle.
#[derive(Debug)]
#[cfg_attr(feature = "fuzz", derive(Clone))]
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `value` and returns its handle.
    pub fn insert(&mut self, value: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(value);
                i
            }
            None => {
                self.slots.push(Some(value));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The object at `handle`.
    pub fn get(&self, handle: u32) -> Option<&T> {
        self.slots.get(handle as usize)?.as_ref()
    }

    /// The object at `handle`, mutably.
    pub fn get_mut(&mut self, handle: u32) -> Option<&mut T> {
        self.slots.get_mut(handle as usize)?.as_mut()
    }

    /// Removes and returns the object at `handle`.
    pub fn remove(&mut self, handle: u32) -> Option<T> {
        let value = self.slots.get_mut(handle as usize)?.take()?;
        self.free.push(handle);
        Some(value)
    }

    /// Every object with its handle.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as u32, s.as_ref()?)))
    }

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_slots() {
        let mut s = Slab::default();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(a), None);
        assert_eq!(s.insert("c"), a);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 2);
    }
}
