//! `ratewarden-fake-openai`: an OpenAI-compatible chat completions server without a model,
//! for trying Ratewarden's token limits (`docs/llm.md`).

use clap::Parser;

/// An OpenAI-compatible chat completions server that answers without a model.
///
/// `POST /v1/chat/completions` answers in JSON, or as an event stream with `"stream": true`,
/// with a `usage` that follows from the request: one prompt token per 4 bytes of message
/// content, `max_completion_tokens` (or `max_tokens`, or 16) completion tokens. The headers
/// `x-fake-completion-tokens: N`, `x-fake-usage: none|malformed` and `x-fake-cut-after: N`
/// pick the usage or make the answer misbehave.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", args.listen))
        })?;
    eprintln!(
        "ratewarden-fake-openai: listening on http://{}",
        listener.local_addr()?
    );
    ratewarden_fake_openai::serve(listener).await;
    Ok(())
}
