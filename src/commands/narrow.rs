//! What a table cut to a narrow terminal says it left out (#53 F17).

/// The line that names the columns a table left out to fit `width`
/// columns (`names`, from [`crate::output::dropped_columns`]) and where they
/// are; `None` when none was left out (#53 F17).
pub fn dropped_columns_line(names: &[String], width: u16) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let noun = if names.len() == 1 {
        "column"
    } else {
        "columns"
    };
    Some(format!(
        "{} {noun} left out to fit {width} columns: {} (a wider terminal, COLUMNS=200, or --json shows them)",
        names.len(),
        names.join(", ")
    ))
}
