//! A context's objects of one kind on the program's side, by the daemon's handle: their
//! queues, and what the program's library keeps with each (the ibverbs provider: the address
//! of its C structure, for the async events and notifications that name the object). It is
//! the only map of them on that side.

use std::collections::HashMap;

/// Objects of one kind.
pub(crate) struct Table<T> {
    map: HashMap<u32, Entry<T>>,
}

struct Entry<T> {
    /// `None` for an object with no queues of its own here (an XRC target QP).
    queues: Option<T>,
    owner: Option<usize>,
}

impl<T> Table<T> {
    pub fn new() -> Table<T> {
        Table {
            map: HashMap::new(),
        }
    }

    /// Gives object `handle` its queues (new ones, after a resize), keeping its owner.
    pub fn set_queues(&mut self, handle: u32, queues: T) {
        self.entry(handle).queues = Some(queues);
    }

    pub fn set_owner(&mut self, handle: u32, owner: usize) {
        self.entry(handle).owner = Some(owner);
    }

    fn entry(&mut self, handle: u32) -> &mut Entry<T> {
        self.map.entry(handle).or_insert(Entry {
            queues: None,
            owner: None,
        })
    }

    pub fn queues(&self, handle: u32) -> Option<&T> {
        self.map.get(&handle)?.queues.as_ref()
    }

    pub fn queues_mut(&mut self, handle: u32) -> Option<&mut T> {
        self.map.get_mut(&handle)?.queues.as_mut()
    }

    pub fn owner(&self, handle: u32) -> Option<usize> {
        self.map.get(&handle)?.owner
    }

    /// Every object's queues.
    pub fn all_queues(&mut self) -> impl Iterator<Item = &mut T> {
        self.map.values_mut().filter_map(|e| e.queues.as_mut())
    }

    /// The object is gone.
    pub fn remove(&mut self, handle: u32) {
        self.map.remove(&handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_outlives_new_queues_and_an_object_may_have_none() {
        let mut t = Table::new();
        t.set_queues(1, "ring");
        t.set_owner(1, 0x1000);
        t.set_queues(1, "resized");
        assert_eq!((t.queues(1), t.owner(1)), (Some(&"resized"), Some(0x1000)));
        // An XRC target QP: an owner, no queues.
        t.set_owner(2, 0x2000);
        assert_eq!((t.queues(2), t.owner(2)), (None, Some(0x2000)));
        assert_eq!(t.all_queues().count(), 1);
        t.remove(1);
        assert_eq!((t.queues(1), t.owner(1)), (None, None));
    }
}
