//! The README's "Limits" table, checked at every page size: the numbers there are these.

use larch::{Db, Error, Options};

/// (page size, largest key and tree name, largest key + value kept in the leaf), as in the README.
const README_TABLE: [(usize, usize, usize); 5] = [
    (4096, 1024, 1350),
    (8192, 2048, 2715),
    (16384, 4096, 5446),
    (32768, 8192, 10907),
    (65536, 16384, 21830),
];

fn overflow_pages(db: &Db, tree: &str) -> u64 {
    let stats = db.stats().unwrap();
    stats
        .trees
        .iter()
        .find(|t| t.name == tree)
        .unwrap()
        .overflow_pages
}

#[test]
fn the_readme_limits_hold_at_every_page_size() {
    let dir = tempfile::tempdir().unwrap();
    for (page_size, max_key, max_inline) in README_TABLE {
        let path = dir.path().join(format!("limits-{page_size}.larch"));
        let db = Db::open(&path, Options::default().page_size(page_size)).unwrap();
        let tx = db.begin_write().unwrap();
        {
            // Keys: 1..=max_key bytes.
            let mut t = tx.open_tree("keys").unwrap();
            assert!(matches!(t.insert(b"", b"v"), Err(Error::EmptyKey)));
            t.insert(&vec![b'k'; max_key], b"v").unwrap();
            match t.insert(&vec![b'k'; max_key + 1], b"v") {
                Err(Error::KeyTooLarge { len, max }) => {
                    assert_eq!((len, max), (max_key + 1, max_key))
                }
                other => panic!("{page_size}: expected KeyTooLarge, got {other:?}"),
            }
        }
        // Tree names: 1..=max_key bytes.
        drop(tx.open_tree(&"n".repeat(max_key)).unwrap());
        assert!(matches!(
            tx.open_tree(&"n".repeat(max_key + 1)),
            Err(Error::InvalidTreeName(_))
        ));
        assert!(matches!(tx.open_tree(""), Err(Error::InvalidTreeName(_))));
        // Key + value up to max_inline stay in the leaf; one byte more goes to an overflow run.
        tx.open_tree("inline")
            .unwrap()
            .insert(b"k", &vec![7; max_inline - 1])
            .unwrap();
        tx.open_tree("overflow")
            .unwrap()
            .insert(b"k", &vec![7; max_inline])
            .unwrap();
        tx.commit().unwrap();
        assert_eq!(overflow_pages(&db, "inline"), 0, "page size {page_size}");
        assert_eq!(overflow_pages(&db, "overflow"), 1, "page size {page_size}");
        db.check().unwrap();
    }
}
