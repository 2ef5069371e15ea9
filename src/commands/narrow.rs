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

/// Hides columns of `table` in `order` (least useful first) until it fits
/// `width`, and says on stderr which it left out.
pub fn drop_and_say(table: &mut comfy_table::Table, width: u16, order: &[usize]) {
    use crate::output;
    let hidden = output::drop_columns(table, width, order);
    if let Some(line) = dropped_columns_line(&output::dropped_columns(table, &hidden), width) {
        output::printer().info(output::wrap_text(
            &line,
            output::table_width(output::Stream::Stderr),
        ));
    }
}
