//! What can go wrong rendering: [`RenderError`].
//!
//! The messages name the spec field, template or value at fault in the
//! spec's and the template's words; they name no command-line flag and give
//! no hint. `commands/` (its advice table) gives each variant its exit status,
//! the flag names and the hint.
use super::template::{describe_char, field_name};

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
