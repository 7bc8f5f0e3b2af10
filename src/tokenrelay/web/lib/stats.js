// The one percentile definition, as tokenrelay's Python core has it (tokenrelay._stream.percentile): linear
// interpolation between the closest ranks, q from 0 to 100, null for no values. Both are checked on the same
// vectors (tests/vectors/percentile.json).

/**
 * @param {number[]} values
 * @param {number} q 0–100
 * @returns {number | null}
 */
export function percentile(values, q) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = ((sorted.length - 1) * q) / 100;
  const low = Math.floor(rank);
  const high = Math.min(low + 1, sorted.length - 1);
  return sorted[low] + (sorted[high] - sorted[low]) * (rank - low);
}
