/**
 * 95% confidence intervals for an evaluation's mean: Wilson's score interval for a rate (values
 * that are all 0 or 1: wins, correct answers), Student's t for any other mean (a reward). With the
 * 24 to 64 games a notebook evaluates, the difference between two policies is only a result when
 * it is larger than this interval.
 * @module
 */

/** A mean and its 95% confidence interval. */
export interface Interval95 {
  /** The sample mean. */
  mean: number;
  /** Lower end of the 95% interval. */
  low: number;
  /** Upper end of the 95% interval. */
  high: number;
  /** `wilson` for a rate (every value 0 or 1), `t` for any other mean. */
  method: "wilson" | "t";
  /** How many values the mean is over. */
  n: number;
}

const Z95 = 1.959963984540054;

// Student's t two-sided 95% quantiles for 1 to 9 degrees of freedom, where the series below is
// not yet accurate to three decimals.
const SMALL_DF_T95 = [12.706204736, 4.30265273, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252, 2.306004135, 2.262157163];

/** The two-sided 95% quantile of Student's t with `df` degrees of freedom (a table to 9, then Fisher's expansion in 1/df: within 0.001). */
export function studentT95(df: number): number {
  if (!Number.isFinite(df) || df < 1) throw new RangeError(`degrees of freedom must be at least 1 (got ${df})`);
  if (df < 10) return SMALL_DF_T95[Math.floor(df) - 1]!;
  const z = Z95;
  const [z3, z5, z7] = [z ** 3, z ** 5, z ** 7];
  return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df ** 2) +
    (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df ** 3);
}

/** Wilson's score interval for `successes` out of `n`: stays inside [0, 1] and is honest near 0 and 1, where the normal one is not. */
export function wilson95(successes: number, n: number): Interval95 {
  if (n <= 0) throw new RangeError("an interval needs at least one value");
  const p = successes / n;
  const z2 = Z95 * Z95;
  const centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const half = (Z95 / (1 + z2 / n)) * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n));
  return { mean: p, low: Math.max(0, centre - half), high: Math.min(1, centre + half), method: "wilson", n };
}

/** The 95% interval of the mean of `values` (Wilson's when every value is 0 or 1, else Student's t). */
export function interval95(values: readonly number[]): Interval95 {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length !== values.length) throw new RangeError("an interval needs finite values (one is NaN or infinite)");
  const n = values.length;
  if (n === 0) throw new RangeError("an interval needs at least one value");
  if (values.every((v) => v === 0 || v === 1)) return wilson95(values.filter((v) => v === 1).length, n);
  const mean = values.reduce((a, b) => a + b, 0) / n;
  if (n === 1) return { mean, low: Number.NEGATIVE_INFINITY, high: Number.POSITIVE_INFINITY, method: "t", n };
  const variance = values.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1);
  const half = studentT95(n - 1) * Math.sqrt(variance / n);
  return { mean, low: mean - half, high: mean + half, method: "t", n };
}
