//! image_e2e tests.
