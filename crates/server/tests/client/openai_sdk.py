"""OpenAI's own Python SDK against the gateway, run by openai_sdk.rs.

usage: openai_sdk.py EXACT_URL PACED_URL

EXACT_URL is a gateway on a clock that stands still; PACED_URL one on the real clock whose
rule lets one request in every 2 s. Prints one JSON object: what the SDK read from each
answer, with the `x-ratelimit-reset-*` durations read by durationpy (a parser of Go's
duration format), and how long the SDK waited before its retry of a 429.
"""

import json
import sys
import time

import durationpy
import openai

MESSAGES = [{"role": "user", "content": "four"}]


def fields(headers):
    """OpenAI's rate limit fields, read as the SDK's callers read them."""
    read = {}
    for family in ("requests", "tokens"):
        read[f"limit_{family}"] = int(headers[f"x-ratelimit-limit-{family}"])
        read[f"remaining_{family}"] = int(headers[f"x-ratelimit-remaining-{family}"])
        reset = durationpy.from_str(headers[f"x-ratelimit-reset-{family}"])
        read[f"reset_{family}_s"] = reset.total_seconds()
    return read


def main():
    exact, paced = sys.argv[1], sys.argv[2]
    out = {}
    client = openai.OpenAI(base_url=exact + "/v1", api_key="project-1", max_retries=0)
    estimate = {"x-estimated-tokens": "300"}

    raw = client.chat.completions.with_raw_response.create(
        model="fake", messages=MESSAGES, max_tokens=99, extra_headers=estimate
    )
    answer = raw.parse()
    out["json"] = {"usage": answer.usage.total_tokens, **fields(raw.headers)}

    raw = client.chat.completions.with_raw_response.create(
        model="fake",
        messages=MESSAGES,
        max_tokens=99,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=estimate,
    )
    chunks = list(raw.parse())
    usages = [c.usage.total_tokens for c in chunks if c.usage is not None]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    out["stream"] = {"usage": usages[-1], "chunks": len(chunks), "text": len(text),
                     **fields(raw.headers)}

    try:
        client.chat.completions.create(
            model="fake", messages=MESSAGES, max_tokens=99, extra_headers=estimate
        )
        out["refused"] = None
    except openai.RateLimitError as e:
        out["refused"] = {
            "status": e.status_code,
            "retry_after": e.response.headers.get("retry-after"),
            **fields(e.response.headers),
        }

    # One retry allowed: the SDK's own backoff before it is about 0.4 s, so the second call
    # succeeds only if the SDK waited what Retry-After said.
    client = openai.OpenAI(base_url=paced + "/v1", api_key="project-1", max_retries=1)
    client.chat.completions.create(model="fake", messages=MESSAGES, max_tokens=1)
    began = time.monotonic()
    client.chat.completions.create(model="fake", messages=MESSAGES, max_tokens=1)
    out["retried_after_s"] = time.monotonic() - began

    print(json.dumps(out))


if __name__ == "__main__":
    main()
