//! "Did you mean …?" for misspelt names, in both config readers.

/// The known name closest to `wrong`, if one is close enough to be a typo: at most two edits
/// (a transposition counting as one), or a third of the name for long names.
pub(crate) fn nearest<'a>(
    wrong: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(wrong, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min()
        .map(|(_, k)| k)
}

/// `"; did you mean `{fix}`?"` for the nearest known name, or nothing.
pub(crate) fn did_you_mean<'a>(wrong: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    nearest(wrong, known)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

/// The algorithm named exactly `name`, as the docs spell it: `token_bucket` or `Token-Bucket`
/// is refused (with a hint) rather than read as `token-bucket`, so that one spelling is the
/// one the docs, logs and metrics show and a search of the files finds.
pub(crate) fn algorithm(name: &str) -> Option<ratewarden_core::AlgorithmKind> {
    ratewarden_core::AlgorithmKind::ALL
        .into_iter()
        .find(|k| k.as_str() == name)
}

/// [`did_you_mean`] for an algorithm, which also finds the one spelt in another case or with
/// underscores (`TOKEN_BUCKET`).
pub(crate) fn algorithm_hint<'a>(wrong: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    match wrong.parse::<ratewarden_core::AlgorithmKind>() {
        Ok(kind) => format!("; did you mean `{kind}`?"),
        Err(_) => did_you_mean(wrong, known),
    }
}
