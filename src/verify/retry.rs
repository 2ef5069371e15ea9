//! One more try before a FAIL counts (`verify --fleet`): a check that
//! failed is run once more, and both results are reported. A second FAIL
//! stands (its message names the first); a pass on the second try is a
//! WARN that names the first failure, so a one-off glitch does not drain a
//! node, and is not forgotten either.
use super::report::Report;
use super::result::Status;

/// The ids of the checks that failed (FAIL or ERROR), each once: what is run again.
pub fn failed_ids(report: &Report) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for r in report.results.iter().filter(|r| r.status.fails_run()) {
        if !ids.contains(&r.id) {
            ids.push(r.id.clone());
        }
    }
    ids
}

/// `first` with each failed result replaced by its second try from `again`
/// (matched by id, GPU and peer): FAIL twice stays FAIL, both messages
/// said; FAIL then PASS (or WARN) becomes a WARN saying so.
pub fn merge(mut first: Report, again: &Report) -> Report {
    for r in first.results.iter_mut().filter(|r| r.status.fails_run()) {
        let second = again
            .results
            .iter()
            .find(|x| x.id == r.id && x.gpu == r.gpu && x.peer == r.peer);
        let Some(second) = second else { continue };
        let was = format!("{}: {}", r.status.label().trim(), r.message);
        *r = if second.status.fails_run() {
            let mut s = second.clone();
            s.message = format!("{} (failed twice; first try: {was})", s.message);
            s.fact("first_try", was)
        } else {
            let mut s = second.clone();
            s.status = Status::Warn;
            s.message = format!("passed on a second try, after {was}");
            s.hint = Some(
                "a one-off glitch, or the start of a fault: watch this node's history".to_string(),
            );
            s.fact("first_try", was)
        };
    }
    first.recount();
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::result::CheckResult;
    use crate::verify::{ExpectGpus, Level};

    fn report(results: Vec<CheckResult>) -> Report {
        Report::new("host", None, Level::Quick, ExpectGpus::Any, results)
    }

    #[test]
    fn a_glitch_is_a_warning_and_a_fault_fails_twice() {
        let first = report(vec![
            CheckResult::pass("nvml.ecc", "ok").gpu(0),
            CheckResult::fail("nvml.throttle", "HW slowdown").gpu(0),
            CheckResult::fail("nvml.throttle", "HW slowdown").gpu(1),
        ]);
        assert_eq!(failed_ids(&first), ["nvml.throttle"]);
        let again = report(vec![
            CheckResult::pass("nvml.throttle", "no throttling").gpu(0),
            CheckResult::fail("nvml.throttle", "HW slowdown again").gpu(1),
        ]);
        let merged = merge(first, &again);
        assert!(!merged.passed);
        let g0 = &merged.results[1];
        assert_eq!(g0.status, Status::Warn);
        assert_eq!(
            g0.message,
            "passed on a second try, after FAIL: HW slowdown"
        );
        let g1 = &merged.results[2];
        assert_eq!(g1.status, Status::Fail);
        assert_eq!(
            g1.message,
            "HW slowdown again (failed twice; first try: FAIL: HW slowdown)"
        );
        assert_eq!(g1.facts["first_try"], "FAIL: HW slowdown");
        // Only the glitch: the node passes, with the warning.
        let first = report(vec![
            CheckResult::fail("nvml.throttle", "HW slowdown").gpu(0)
        ]);
        let again = report(vec![CheckResult::pass("nvml.throttle", "ok").gpu(0)]);
        let merged = merge(first, &again);
        assert!(merged.passed);
        assert_eq!(merged.summary.warn, 1);
    }
}
