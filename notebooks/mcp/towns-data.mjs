// The gazetteer behind towns-server.mjs: 48 made-up towns, generated from a fixed seed so every run
// (and the notebook's answer checks) sees the same populations and founding years.
const FIRST = ["Brindle", "Ash", "Thorn", "Wick", "Marl", "Holl", "Kes", "Dun", "Fen", "Grim", "Oak", "Stam"];
const LAST = ["moor", "ford", "by", "wick"];

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const random = mulberry32(2026);
export const TOWNS = FIRST.flatMap((first) => LAST.map((last) => ({
  name: first + last,
  population: 1000 + Math.floor(random() * 89000),
  founded: 1200 + Math.floor(random() * 700),
})));
