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
