//! Tests of the task reader's pure parts: stacks as CPython builds them, and the
//! asyncio offsets' checks.

use super::*;

fn task(name: &str, parents: &[u64], frames: &[(u64, u64)]) -> Task {
    Task {
        name: name.into(),
        parents: parents.to_vec(),
        frames: frames.to_vec(),
    }
}

#[test]
fn stacks_go_from_the_leaf_to_the_root_as_cpython_builds_them() {
    // root(1) <- mid(2) <- leaf(3), and leaf2(4) awaited by both mid and root.
    let tasks: HashMap<u64, Task> = [
        (1, task("Task-1", &[], &[(10, 0)])),
        (2, task("mid", &[1], &[(20, 0), (21, 0)])),
        (3, task("", &[2], &[(30, 0)])),
        (4, task("leaf2", &[2, 1], &[])),
    ]
    .into();
    assert_eq!(leaves(&tasks), vec![3, 4]);
    let mut out = Vec::new();
    linear_stack(3, &tasks, &mut out);
    use StackItem::{Code, Task as Mark};
    assert_eq!(
        out,
        vec![
            Code(30, 0),
            Mark("Task-3".into()),
            Code(20, 0),
            Code(21, 0),
            Mark("mid".into()),
            Code(10, 0),
            Mark("Task-1".into()),
        ]
    );
    out.clear();
    linear_stack(4, &tasks, &mut out);
    // Two parents: the lowest address is followed, the name says how many.
    assert_eq!(
        out,
        vec![
            Mark("leaf2 (2 parents)".into()),
            Code(10, 0),
            Mark("Task-1".into())
        ]
    );
}

#[test]
fn a_cycle_or_a_missing_parent_ends_the_stack() {
    let tasks: HashMap<u64, Task> = [
        (1, task("a", &[2], &[])),
        (2, task("b", &[1], &[])),
        (3, task("c", &[99], &[])),
    ]
    .into();
    let mut out = Vec::new();
    linear_stack(1, &tasks, &mut out);
    assert_eq!(
        out,
        vec![StackItem::Task("a".into()), StackItem::Task("b".into())]
    );
    out.clear();
    linear_stack(3, &tasks, &mut out);
    assert_eq!(out, vec![StackItem::Task("c".into())]);
}

#[test]
fn asyncio_offsets_are_checked_before_use() {
    // The section of Debian's CPython 3.15.2 executable (objcopy --only-section).
    let words: [u64; 13] = [
        168, 136, 96, 108, 109, 128, 152, 226240, 10856, 1104, 1024, 1032, 1048,
    ];
    let ok: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let o = AsyncioOffsets::parse(&ok).unwrap();
    assert_eq!((o.task_coro, o.tstate_running_task), (128, 1032));
    assert_eq!((o.interp_tasks_head, o.tstate_tasks_head), (10856, 1048));
    // A field past the object it belongs to, and a cut-short section, are refused.
    let mut bad = ok.clone();
    bad[8..16].copy_from_slice(&500u64.to_ne_bytes());
    assert!(AsyncioOffsets::parse(&bad).is_err());
    assert!(AsyncioOffsets::parse(&ok[..50]).is_err());
}
