//! Verify passes leave GDN states alone; committing a prefix equals having
//! run only that prefix.

use crate::model::state::StateOptions;
use crate::model::tiny::*;
use crate::model::{ForwardError, LogitsFor};

const PREFIX: [u32; 3] = [3, 17, 42];
const DRAFT: [u32; 4] = [0, 49, 5, 6];

fn opts() -> StateOptions {
    let mut o = StateOptions::new(16);
    o.max_batch = 8;
    o
}

#[test]
fn verify_logits_equal_a_plain_forward_and_gdn_states_stay_untouched() {
    let tm = TinyModel::random(tiny_config(4, 2), 61);
    let model = tm.model();
    let mut plain = model.new_state(opts()).unwrap();
    model
        .forward(&mut plain, &PREFIX, 0, LogitsFor::Last)
        .unwrap();
    let want = model
        .forward(&mut plain, &DRAFT, 3, LogitsFor::All)
        .unwrap()
        .to_vec();

    let mut st = model.new_state(opts()).unwrap();
    model.forward(&mut st, &PREFIX, 0, LogitsFor::Last).unwrap();
    let before = st.recurrent.clone();
    let got = model
        .forward_verify(&mut st, &DRAFT, 3, LogitsFor::All)
        .unwrap();
    assert_eq!(got, &want[..]);
    assert_eq!(st.recurrent, before, "the verify pass wrote a GDN state");
    assert_eq!(st.n_past(), 7);
    assert!(st.verify_pending());
}

#[test]
fn committing_a_prefix_equals_running_only_that_prefix() {
    let tm = TinyModel::random(tiny_config(4, 2), 62);
    let model = tm.model();
    for n_keep in [0usize, 1, 2, 4] {
        let mut plain = model.new_state(opts()).unwrap();
        model
            .forward(&mut plain, &PREFIX, 0, LogitsFor::Last)
            .unwrap();
        if n_keep > 0 {
            model
                .forward(&mut plain, &DRAFT[..n_keep], 3, LogitsFor::Last)
                .unwrap();
        }
        let want = model
            .forward(&mut plain, &[8], 3 + n_keep, LogitsFor::Last)
            .unwrap()
            .to_vec();

        let mut st = model.new_state(opts()).unwrap();
        model.forward(&mut st, &PREFIX, 0, LogitsFor::Last).unwrap();
        model
            .forward_verify(&mut st, &DRAFT, 3, LogitsFor::All)
            .unwrap();
        model.commit_verify(&mut st, n_keep).unwrap();
        assert_eq!(st.n_past(), 3 + n_keep);
        assert!(!st.verify_pending());
        let got = model
            .forward(&mut st, &[8], 3 + n_keep, LogitsFor::Last)
            .unwrap();
        assert_eq!(got, &want[..], "n_keep {n_keep}");
        assert_eq!(st.recurrent, plain.recurrent, "n_keep {n_keep}");
    }
}

#[test]
fn verify_misuse_is_an_error() {
    let tm = TinyModel::random(tiny_config(4, 2), 63);
    let model = tm.model();
    let mut st = model.new_state(opts()).unwrap();
    assert_eq!(
        model.commit_verify(&mut st, 0).unwrap_err(),
        ForwardError::NoVerifyPending
    );
    assert_eq!(
        model
            .forward_verify(&mut st, &[1; 9], 0, LogitsFor::All)
            .unwrap_err(),
        ForwardError::VerifyTooLong { n: 9, max_batch: 8 }
    );
    model
        .forward_verify(&mut st, &DRAFT, 0, LogitsFor::All)
        .unwrap();
    assert_eq!(
        model
            .forward(&mut st, &[1], 4, LogitsFor::Last)
            .unwrap_err(),
        ForwardError::VerifyPending
    );
    assert_eq!(
        model.commit_verify(&mut st, 5).unwrap_err(),
        ForwardError::KeepTooMany { n_keep: 5, n: 4 }
    );
    model.commit_verify(&mut st, 4).unwrap();
    assert_eq!(st.n_past(), 4);
}
