//! "Did you mean": the closest known name to a misspelt one, by edit distance.
//!
//! Why edit distance and not prefixes: the usual mistakes are a dropped or doubled letter
//! (`VoidConsumr`, `replica`), a swapped case (`intProducer`) or the class without its module
//! (`IdentityProcessor`), none of which a prefix match finds.

/// Edit distance over chars: insert, delete, substitute, or swap two neighbours (`fsp` →
/// `fps`), each costing 1 (optimal string alignment).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

/// The most edits a suggestion may be away: about a third of the word, at least one and at
/// most three (a long dotted name shares most of its length with every other one).
fn budget(word: &str) -> usize {
    (word.chars().count() / 3).clamp(1, 3)
}

/// The last dotted segment (`IntProducer` of `videoflow.producers.IntProducer`).
fn last_segment(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The candidate closest to `word` (case-insensitive), if any is within budget. Dotted names
/// also match on their last segment, so `IdentityProcessor` finds its module path. Ties go
/// to the earliest candidate, so callers list canonical names first.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_lowercase();
    let tail = last_segment(&lower).to_owned();
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let lc = c.to_lowercase();
        let whole = edit_distance(&lower, &lc);
        let mut score = (whole <= budget(&lower)).then_some(whole);
        let seg = edit_distance(&tail, last_segment(&lc));
        if seg <= budget(&tail) {
            // A segment match is weaker than a whole match of the same distance.
            let seg_score = seg + 1;
            score = Some(score.map_or(seg_score, |s| s.min(seg_score)));
        }
        if let Some(s) = score
            && best.is_none_or(|(b, _)| s < b)
        {
            best = Some((s, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("replica", "replicas"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        assert_eq!(edit_distance("fsp", "fps"), 1);
    }

    #[test]
    fn close_names_are_found_far_ones_are_not() {
        let names = ["replicas", "parents", "partitionBy"];
        assert_eq!(closest("replica", names), Some("replicas"));
        assert_eq!(closest("PARENTS", names), Some("parents"));
        assert_eq!(closest("zebra", names), None);
        assert_eq!(
            closest(
                "videoflow.consumers.basic.WebhookConsumer",
                ["videoflow.consumers.basic.VoidConsumer"]
            ),
            None
        );
    }

    #[test]
    fn a_bare_class_finds_its_module_path() {
        let names = [
            "videoflow.processors.basic.IdentityProcessor",
            "videoflow.processors.basic.JoinerProcessor",
        ];
        assert_eq!(closest("IdentityProcesor", names), Some(names[0]));
    }
}
