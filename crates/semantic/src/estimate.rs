//! The estimate of one read, for an admission gate ([`crate::gate`]).
//!
//! - Input tokens: ceil(bytes of the system prompt and the evidence JSON / 3), the proxy's
//!   default rule (`prompt_bytes_per_token = 3`): conservative, since a token of English or JSON
//!   is rarely under 3 bytes.
//! - Output tokens: the reader's `max_tokens` ([`crate::Reader::max_output_tokens`]), else
//!   [`DEFAULT_OUTPUT_TOKENS`] (an answer of the contract is one short JSON object).
//! - Cost: the input and output tokens at the reader's prices ([`crate::Reader::prices`]);
//!   unknown without them, and a governor whose profile refuses unknown costs
//!   (`allowUnknownCost: false` with `maxCostUsd`) refuses such reads.
//!
//! Settlement replaces the estimate with the usage the endpoint reported.

use crate::answer::SYSTEM_PROMPT;
use crate::gate::ReadEstimate;
use crate::{ReadRequest, Reader};

/// Output tokens assumed for a reader without `max_tokens`.
pub const DEFAULT_OUTPUT_TOKENS: u64 = 1_024;

/// Prompt bytes counted per input token.
const PROMPT_BYTES_PER_TOKEN: u64 = 3;

/// The estimate of `request` read by `reader`.
pub fn read_estimate(reader: &dyn Reader, request: &ReadRequest<'_>) -> ReadEstimate {
    let bytes = (SYSTEM_PROMPT.len() + request.evidence_json.len()) as u64;
    let input = bytes.div_ceil(PROMPT_BYTES_PER_TOKEN);
    let output = reader
        .max_output_tokens()
        .map_or(DEFAULT_OUTPUT_TOKENS, u64::from);
    ReadEstimate {
        tokens: input.saturating_add(output),
        cost_usd: reader.prices().map(|prices| prices.cost_usd(input, output)),
        prices: reader.prices(),
    }
}
