//! The op profiler (`model::profile`): its own test binary, because the
//! profile is process-wide and other tests' forward passes would add to it.

use clover::model::profile::{self, Op};

#[test]
fn kinds_add_up_and_nest_and_cost_nothing_when_off() {
    profile::start();
    {
        let _a = profile::enter(Op::Experts);
        profile::bytes(100);
        std::thread::sleep(std::time::Duration::from_millis(3));
        {
            let _b = profile::enter(Op::Norm);
            profile::bytes(7);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        profile::bytes(1);
    }
    profile::bytes(5);
    let p = profile::finish();
    assert_eq!(p.bytes(Op::Experts), 101);
    assert_eq!(p.bytes(Op::Norm), 7);
    assert_eq!(p.bytes(Op::Other), 5);
    assert!(p.ns(Op::Experts) >= 3_000_000, "{p:?}");
    assert!(p.ns(Op::Experts) < p.total_ns(), "{p:?}");
    assert!(p.ns(Op::Norm) >= 2_000_000, "{p:?}");
    assert_eq!(p.ns(Op::Head), 0);
    // Off: nothing is charged.
    {
        let _c = profile::enter(Op::Head);
        profile::bytes(9);
    }
    let off = profile::finish();
    assert_eq!(off.bytes(Op::Head), 0);
    assert_eq!(off.ns(Op::Head), 0);
    let t = p.table("decode", 1, Some(10.0));
    for want in ["routed experts", "norms", "total", "read probe 10.0 GB/s"] {
        assert!(t.contains(want), "{want} missing from\n{t}");
    }
    assert!(
        !t.contains("output head"),
        "kinds that never ran are left out\n{t}"
    );
}

#[test]
fn every_kind_sits_at_its_own_index() {
    for (i, op) in Op::ALL.iter().enumerate() {
        assert_eq!(*op as usize, i, "{op:?}");
    }
}
