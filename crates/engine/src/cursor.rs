//! Range iteration over a committed tree, both directions, zero-copy.

use std::ops::Bound;

use larch_pager::{PageRole, TreeRoot};

use crate::error::{Error, Result};
use crate::node_page::{NodePage, ValRef, PREFETCHED_LEVELS};
use crate::view::{View, MAX_DEPTH};

/// A position in a tree: the path of (page, index) from the root to a leaf entry.
#[derive(Debug)]
struct Cursor<'a> {
    stack: Vec<(NodePage<'a>, usize)>,
    /// Pages descended into so far: a valid tree never needs more than the file has, so more
    /// means a cycle or shared pages in a damaged file.
    visited: u64,
}

enum Seek<'k> {
    First,
    Last,
    /// First entry >= key (or > key if exclusive).
    Ge(&'k [u8], bool),
    /// Last entry <= key (or < key if exclusive).
    Le(&'k [u8], bool),
}

impl<'a> Cursor<'a> {
    fn new(depth: u32) -> Self {
        Cursor {
            stack: Vec::with_capacity(depth.min(MAX_DEPTH) as usize),
            visited: 0,
        }
    }

    fn visit(&mut self, view: &View<'a>, id: u64, role: PageRole) -> Result<NodePage<'a>> {
        self.visited += 1;
        if self.visited > view.high_water || self.stack.len() > MAX_DEPTH as usize {
            return Err(Error::corrupt(
                id,
                "tree walk visits more pages than the file holds (cycle?)",
            ));
        }
        view.node(id, role)
    }

    /// Start loading the leaf after (`forward`) or before the one the cursor just stepped
    /// into, when their parent on the stack names it: a scan that goes on into it finds its
    /// first line on the way, where it would wait for it (and its page-table entry) only
    /// once there. A neighbour under another parent is not looked for.
    #[inline]
    fn prefetch_neighbour(&self, view: &View<'a>, forward: bool) {
        let Some([(parent, i), _]) = self.stack.last_chunk::<2>() else {
            return;
        };
        let j = if forward {
            i.checked_add(1)
        } else {
            i.checked_sub(1)
        };
        if let Some(id) = j
            .filter(|&j| j < parent.count)
            .and_then(|j| parent.child(j).ok())
        {
            view.prefetch_page(id);
        }
    }

    /// Position per `seek`. Returns false if there is no such entry.
    fn seek(
        &mut self,
        view: &View<'a>,
        root: &TreeRoot,
        role: PageRole,
        seek: &Seek<'_>,
    ) -> Result<bool> {
        self.stack.clear();
        if root.root == 0 {
            return Ok(false);
        }
        let mut id = root.root;
        let by_key = matches!(seek, Seek::Ge(..) | Seek::Le(..));
        loop {
            let p = self.visit(view, id, role)?;
            let level = root.depth.saturating_sub(self.stack.len() as u32);
            if by_key && level <= PREFETCHED_LEVELS {
                p.prefetch_search();
            }
            if p.leaf {
                let forward = matches!(seek, Seek::First | Seek::Ge(..));
                let idx: isize = match seek {
                    Seek::First => 0,
                    Seek::Last => p.count as isize - 1,
                    Seek::Ge(k, excl) => match p.search(k)? {
                        Ok(i) if *excl => i as isize + 1,
                        Ok(i) => i as isize,
                        Err(i) => i as isize,
                    },
                    Seek::Le(k, excl) => match p.search(k)? {
                        Ok(i) if *excl => i as isize - 1,
                        Ok(i) => i as isize,
                        Err(i) => i as isize - 1,
                    },
                };
                let count = p.count as isize;
                if forward {
                    self.stack.push((p, idx.max(0) as usize));
                    if idx >= count {
                        return self.next(view, role);
                    }
                } else {
                    if idx < 0 {
                        self.stack.push((p, 0));
                        return self.prev(view, role);
                    }
                    self.stack.push((p, idx as usize));
                }
                self.prefetch_neighbour(view, forward);
                return Ok(true);
            }
            let i = match seek {
                Seek::First => 0,
                Seek::Last => p.count - 1,
                Seek::Ge(k, _) | Seek::Le(k, _) => p.child_index(k)?,
            };
            id = p.child(i)?;
            self.stack.push((p, i));
        }
    }

    /// Move to the next entry if it is in the same leaf, and return it; None (not moved)
    /// otherwise, or if that entry is damaged (`next` then reports it).
    #[inline]
    fn next_in_leaf(&mut self) -> Option<(&'a [u8], ValRef<'a>)> {
        let (page, idx) = self.stack.last_mut()?;
        if !page.leaf || *idx + 1 >= page.count {
            return None;
        }
        let e = page.entry(*idx + 1).ok()?;
        *idx += 1;
        Some(e)
    }

    /// Move to the next entry; false when past the last.
    fn next(&mut self, view: &View<'a>, role: PageRole) -> Result<bool> {
        loop {
            let Some((page, idx)) = self.stack.last_mut() else {
                return Ok(false);
            };
            if page.leaf && *idx + 1 < page.count {
                *idx += 1;
                return Ok(true);
            }
            // Climb to the first ancestor with a next child, then take leftmost leaves down.
            self.stack.pop();
            loop {
                let Some((page, idx)) = self.stack.last_mut() else {
                    return Ok(false);
                };
                if *idx + 1 < page.count {
                    *idx += 1;
                    let mut id = page.child(*idx)?;
                    loop {
                        let p = self.visit(view, id, role)?;
                        if p.leaf {
                            // The scan goes on through this leaf's entries, in order.
                            p.prefetch_scan(true);
                            let empty = p.count == 0;
                            self.stack.push((p, 0));
                            if empty {
                                break; // a damaged or root-only empty leaf: keep moving
                            }
                            self.prefetch_neighbour(view, true);
                            return Ok(true);
                        }
                        id = p.child(0)?;
                        self.stack.push((p, 0));
                    }
                    break;
                }
                self.stack.pop();
            }
        }
    }

    /// Move to the previous entry; false when before the first.
    fn prev(&mut self, view: &View<'a>, role: PageRole) -> Result<bool> {
        loop {
            let Some((page, idx)) = self.stack.last_mut() else {
                return Ok(false);
            };
            if page.leaf && *idx > 0 && *idx <= page.count {
                *idx -= 1;
                return Ok(true);
            }
            self.stack.pop();
            loop {
                let Some((page, idx)) = self.stack.last_mut() else {
                    return Ok(false);
                };
                if *idx > 0 {
                    *idx -= 1;
                    let mut id = page.child(*idx)?;
                    loop {
                        let p = self.visit(view, id, role)?;
                        if p.leaf {
                            p.prefetch_scan(false);
                            let n = p.count;
                            // Index one past the end so the outer loop steps to n - 1.
                            self.stack.push((p, n));
                            self.prefetch_neighbour(view, false);
                            break;
                        }
                        let last = p.count - 1;
                        id = p.child(last)?;
                        self.stack.push((p, last));
                    }
                    break;
                }
                self.stack.pop();
            }
        }
    }

    fn current(&self, view: &View<'a>) -> Result<(&'a [u8], &'a [u8])> {
        let (page, idx) = self
            .stack
            .last()
            .ok_or_else(|| Error::corrupt(0, "cursor off the tree"))?;
        let (k, v) = page.entry(*idx)?;
        Ok((k, view.value(v)?))
    }
}

/// Iterator over `(key, value)` pairs of a range, in key order, from either end.
///
/// Items are `Result`s: a damaged page ends the iteration with an error. See
/// [`crate::ReadTree::range`] for an example.
#[derive(Debug)]
pub struct Range<'a> {
    view: View<'a>,
    root: TreeRoot,
    role: PageRole,
    start: Bound<KeyBuf>,
    end: Bound<KeyBuf>,
    front: Option<Cursor<'a>>,
    back: Option<Cursor<'a>>,
    front_key: Option<&'a [u8]>,
    back_key: Option<&'a [u8]>,
    done: bool,
}

/// Keys up to this long are kept inside a [`Range`]'s bounds rather than allocated.
const SHORT_KEY: usize = 32;

/// A copy of a bound's key: a range outlives the caller's key, and most keys are short
/// enough that copying them in place saves an allocation per range.
#[derive(Debug)]
enum KeyBuf {
    Short { len: u8, bytes: [u8; SHORT_KEY] },
    Long(Vec<u8>),
}

impl KeyBuf {
    fn new(k: &[u8]) -> KeyBuf {
        let mut bytes = [0; SHORT_KEY];
        match bytes.get_mut(..k.len()) {
            Some(b) => {
                b.copy_from_slice(k);
                KeyBuf::Short {
                    len: k.len() as u8,
                    bytes,
                }
            }
            None => KeyBuf::Long(k.to_vec()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBuf::Short { len, bytes } => &bytes[..*len as usize],
            KeyBuf::Long(v) => v,
        }
    }
}

fn owned(b: Bound<&[u8]>) -> Bound<KeyBuf> {
    match b {
        Bound::Included(k) => Bound::Included(KeyBuf::new(k)),
        Bound::Excluded(k) => Bound::Excluded(KeyBuf::new(k)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl<'a> Range<'a> {
    pub(crate) fn new(
        view: View<'a>,
        root: TreeRoot,
        role: PageRole,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Self {
        Range {
            view,
            root,
            role,
            start: owned(start),
            end: owned(end),
            front: None,
            back: None,
            front_key: None,
            back_key: None,
            done: false,
        }
    }

    /// Called per entry of a forward scan: inlined so an unbounded end costs two tests.
    #[inline(always)]
    fn below_end(&self, k: &[u8]) -> bool {
        let in_bound = match &self.end {
            Bound::Included(e) => k <= e.as_slice(),
            Bound::Excluded(e) => k < e.as_slice(),
            Bound::Unbounded => true,
        };
        in_bound && self.back_key.is_none_or(|b| k < b)
    }

    #[inline]
    fn above_start(&self, k: &[u8]) -> bool {
        let in_bound = match &self.start {
            Bound::Included(s) => k >= s.as_slice(),
            Bound::Excluded(s) => k > s.as_slice(),
            Bound::Unbounded => true,
        };
        in_bound && self.front_key.is_none_or(|f| k > f)
    }

    fn step_front(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        // Most steps stay in the current leaf: no climb, no re-parse of the page.
        if let Some((k, v)) = self.front.as_mut().and_then(Cursor::next_in_leaf) {
            let v = self.view.value(v)?;
            if !self.below_end(k) {
                return Ok(None);
            }
            self.front_key = Some(k);
            return Ok(Some((k, v)));
        }
        let moved = match self.front.as_mut() {
            Some(c) => c.next(&self.view, self.role)?,
            None => {
                let mut c = Cursor::new(self.root.depth);
                let seek = match &self.start {
                    Bound::Included(k) => Seek::Ge(k.as_slice(), false),
                    Bound::Excluded(k) => Seek::Ge(k.as_slice(), true),
                    Bound::Unbounded => Seek::First,
                };
                let found = c.seek(&self.view, &self.root, self.role, &seek)?;
                self.front = Some(c);
                found
            }
        };
        if !moved {
            return Ok(None);
        }
        let Some(c) = self.front.as_ref() else {
            return Ok(None);
        };
        let (k, v) = c.current(&self.view)?;
        if !self.below_end(k) {
            return Ok(None);
        }
        self.front_key = Some(k);
        Ok(Some((k, v)))
    }

    fn step_back(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let moved = match self.back.as_mut() {
            Some(c) => c.prev(&self.view, self.role)?,
            None => {
                let mut c = Cursor::new(self.root.depth);
                let seek = match &self.end {
                    Bound::Included(k) => Seek::Le(k.as_slice(), false),
                    Bound::Excluded(k) => Seek::Le(k.as_slice(), true),
                    Bound::Unbounded => Seek::Last,
                };
                let found = c.seek(&self.view, &self.root, self.role, &seek)?;
                self.back = Some(c);
                found
            }
        };
        if !moved {
            return Ok(None);
        }
        let Some(c) = self.back.as_ref() else {
            return Ok(None);
        };
        let (k, v) = c.current(&self.view)?;
        if !self.above_start(k) {
            return Ok(None);
        }
        self.back_key = Some(k);
        Ok(Some((k, v)))
    }
}

/// A range iterator's answer for one step; after the end or an error the iterator is done
/// (it is fused).
pub(crate) fn finish<T>(done: &mut bool, r: Result<Option<T>>) -> Option<Result<T>> {
    match r {
        Ok(Some(x)) => Some(Ok(x)),
        Ok(None) => {
            *done = true;
            None
        }
        Err(e) => {
            *done = true;
            Some(Err(e))
        }
    }
}

impl<'a> Iterator for Range<'a> {
    type Item = Result<(&'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step_front();
        finish(&mut self.done, r)
    }
}

impl DoubleEndedIterator for Range<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step_back();
        finish(&mut self.done, r)
    }
}

#[cfg(test)]
mod tests {
    use super::{KeyBuf, SHORT_KEY};

    #[test]
    fn key_buf_keeps_short_and_long_keys_exactly() {
        for len in [0, 1, SHORT_KEY - 1, SHORT_KEY, SHORT_KEY + 1, 300] {
            let k: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            let b = KeyBuf::new(&k);
            assert_eq!(b.as_slice(), &k[..]);
            assert_eq!(matches!(b, KeyBuf::Short { .. }), len <= SHORT_KEY);
        }
    }
}
