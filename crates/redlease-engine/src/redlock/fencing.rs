//! Fencing tokens: the token of a grant and which granted masters must be raised to it.
//!
//! Every master keeps one counter (`<prefix>fence`, no TTL) that `acquire.lua` INCRs. The
//! token of a grant is the largest counter among the granted masters; granted masters below it
//! are raised to it (`raise_fence.lua`, max-assign) before the grant, and the grant stands only
//! if a quorum then holds at least the token. Any two majorities intersect, so the next
//! holder's INCR on the intersection yields more than the token: tokens strictly increase
//! across successive holders even when the granting majority changes.

/// What the fencing step has to do for one grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencePlan {
    /// The fencing token of the grant.
    pub token: u64,
    /// Granted masters whose counter already equals the token.
    pub at_token: Vec<usize>,
    /// Granted masters whose counter is below the token.
    pub to_raise: Vec<usize>,
}

/// Plans the fencing step from the granted masters' counters, `(node index, counter)`.
/// `None` when nothing was granted.
pub fn plan(granted: &[(usize, u64)]) -> Option<FencePlan> {
    let token = granted.iter().map(|&(_, counter)| counter).max()?;
    let (at_token, below): (Vec<_>, Vec<_>) = granted.iter().partition(|&&(_, c)| c == token);
    Some(FencePlan {
        token,
        at_token: at_token.into_iter().map(|(node, _)| node).collect(),
        to_raise: below.into_iter().map(|(node, _)| node).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In steady state every granted counter is equal and nothing needs raising.
    #[test]
    fn equal_counters_need_no_raise() {
        let plan = plan(&[(0, 7), (1, 7), (3, 7)]).unwrap();
        assert_eq!(plan.token, 7);
        assert_eq!(plan.at_token, [0, 1, 3]);
        assert!(plan.to_raise.is_empty());
    }

    /// The token is the largest granted counter; the others are raised to it.
    #[test]
    fn lagging_counters_are_raised_to_the_maximum() {
        let plan = plan(&[(0, 3), (2, 9), (4, 5)]).unwrap();
        assert_eq!(plan.token, 9);
        assert_eq!(plan.at_token, [2]);
        assert_eq!(plan.to_raise, [0, 4]);
        assert_eq!(super::plan(&[]), None);
    }
}
