//! What can go wrong rendering: [`RenderError`].
//!
//! The messages name the spec field, template or value at fault in the
//! spec's and the template's words; they name no command-line flag and give
//! no hint. `commands/` (its advice table) gives each variant its exit status,
//! the flag names and the hint. [`field_name`] and [`describe_char`] word
//! the field and the character of a control character in the context.

/// A spec, options or template that cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The spec's torch version and variant are not in the compatibility
    /// table (validation rules this out; a hand-made spec may not).
    #[error("no torch {version} wheel for {variant} in the compatibility table")]
    NoWheel {
        /// The torch version.
        version: String,
        /// The wheel variant (`cu126`).
        variant: String,
    },
    /// A user spec's template file cannot be read.
    #[error("cannot read template {path}: {error}")]
    TemplateUnreadable {
        /// The template file, as displayed.
        path: String,
        /// Why not.
        error: std::io::Error,
    },
    /// A user spec's template does not render (an undefined variable, a
    /// syntax error): the template's name, line and what is wrong.
    #[error("{0}")]
    UserTemplate(String),
    /// The bundled template does not render (a bug in imgctl).
    #[error("{0}")]
    BundledTemplate(String),
    /// A line of the rendered Dockerfile is longer than Docker reads.
    #[error("the rendered Dockerfile's line {line} is {len} bytes long (it starts {start}); Docker reads lines of at most 64 KiB")]
    LineTooLong {
        /// The line number (1-based).
        line: usize,
        /// Its length in bytes.
        len: usize,
        /// Its first 40 characters, printable.
        start: String,
    },
    /// The template context does not serialize (a bug in imgctl).
    #[error("cannot serialize the template context: {error}")]
    ContextUnserializable {
        /// Why not.
        error: serde_json::Error,
    },
    /// A value that would reach the Dockerfile holds a control character.
    #[error("{} contains the control character {} and cannot be written into a Dockerfile", field_name(path), describe_char(*ch))]
    ControlCharacter {
        /// The path to the value in the template context (`["pip", "2"]`).
        path: Vec<String>,
        /// The first control character in it.
        ch: char,
    },
    /// A pip index URL that is not a clean http(s) URL (shown with any
    /// credentials masked).
    #[error("invalid pip index URL '{masked}': expected an http(s) URL without spaces or quotes")]
    PipIndexUrlInvalid {
        /// The URL, credentials masked.
        masked: String,
    },
    /// A pip index URL with credentials, which would be stored in the image.
    #[error("pip index URL '{masked}' contains credentials (user or password before '@'), which would be stored in the image's history and labels")]
    PipIndexUrlCredentials {
        /// The URL, credentials masked.
        masked: String,
    },
}

/// What a person calls the context field at `path` (the spec field or the
/// option it came from).
pub fn field_name(path: &[String]) -> String {
    let parts: Vec<&str> = path.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["spec_origin"] => "the spec's path".to_string(),
        ["profile"] => "the spec's `name`".to_string(),
        ["description"] => "the spec's `description`".to_string(),
        ["base_image"] => "the base image (`base_image` or its replacement)".to_string(),
        ["spec_base_image"] => "the spec's `base_image`".to_string(),
        ["lock", "origin"] => "the spec's `lock` path".to_string(),
        ["labels", i, "0"] => format!("the key of label {i} (`labels`)"),
        ["labels", _, "1"] => "a label value (`labels`, `description` or `name`)".to_string(),
        ["pip", i] => format!("`pip[{i}]`"),
        ["apt", i] => format!("`apt[{i}]`"),
        ["user", "name"] => "the spec's `user.name`".to_string(),
        ["pip_index_url"] => "the pip index URL".to_string(),
        ["torch", field] => format!("the spec's `torch.{field}`"),
        ["notes", ..] => "a build note (from `name` or the base image)".to_string(),
        _ => format!("the template value `{}`", path.join(".")),
    }
}

/// `U+000A (line feed)` and the like.
pub fn describe_char(c: char) -> String {
    let name = match c {
        '\n' => " (line feed)",
        '\r' => " (carriage return)",
        '\t' => " (tab)",
        '\0' => " (NUL)",
        '\u{1b}' => " (escape)",
        _ => "",
    };
    format!("U+{:04X}{name}", c as u32)
}
