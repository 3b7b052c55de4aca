/**
 * Seeded randomness for environments: the same seed gives the same boards, opponents and
 * scenarios, so a baseline and a trained model face the same games and runs repeat.
 * @module
 */

/** A random source: a number in [0, 1), like `Math.random`. */
export type Random = () => number;

/** A deterministic pseudo-random generator (mulberry32) seeded by `seed`. */
export function rng(seed: number): Random {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An integer in [min, max], both included. */
export function randomInt(random: Random, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}

/** One item of a non-empty list. */
export function randomChoice<T>(random: Random, items: readonly T[]): T {
  if (!items.length) throw new RangeError("randomChoice: the list is empty");
  return items[Math.floor(random() * items.length)] as T;
}

/** A shuffled copy (Fisher-Yates). */
export function shuffled<T>(random: Random, items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}
