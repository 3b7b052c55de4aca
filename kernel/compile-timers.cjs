// Lets tslab's compiler hold more than one pending timer, so a file changing on disk between two
// cells can no longer break the kernel for good.
//
// tslab compiles each cell with TypeScript's watch API. It replaces the compiler host's setTimeout
// with a single slot that it runs itself at the next compile, and throws "Unexpected pending
// rebuildTimer" when a second timer is asked for while one is pending. TypeScript keeps two
// timers: one that rebuilds the program and one that re-checks failed module lookups. The second
// is set by its file watchers when a file changes where a module lookup looked (a package.json in
// node_modules, an `npm install`, a new .ts file in lib/). The next cell's own rebuild then throws,
// the slot is never emptied, and every later cell fails with the same error until a restart.
//
// The fix keeps tslab's single slot and multiplexes TypeScript's timers into it: each timer gets
// its own handle, tslab's slot runs all of them (and any they schedule) in order. tslab assigns
// its functions on an object created from `ts.sys`, so setters on `ts.sys` catch the assignment.
"use strict";

/**
 * Installs the multiplexer on `ts.sys` of tslab's TypeScript. Returns false when tslab's
 * internals no longer look as expected (then nothing is changed).
 */
function installCompileTimers(ts) {
  const sys = ts.sys;
  const own = (name) => Object.getOwnPropertyDescriptor(sys, name);
  const setDescriptor = own("setTimeout");
  const clearDescriptor = own("clearTimeout");
  if (!setDescriptor || !clearDescriptor || !("value" in setDescriptor) || !("value" in clearDescriptor)) return false;

  const captured = new WeakMap(); // a converter's host -> the set/clear functions tslab gave it
  const accessor = (name, descriptor) => ({
    configurable: true,
    enumerable: descriptor.enumerable,
    get() {
      return descriptor.value;
    },
    set(fn) {
      if (this === sys) {
        descriptor.value = fn;
        return;
      }
      const inner = captured.get(this) ?? {};
      inner[name] = fn;
      captured.set(this, inner);
      if (inner.setTimeout && inner.clearTimeout) {
        const timers = multiplex(inner.setTimeout, inner.clearTimeout);
        Object.defineProperty(this, "setTimeout", { value: timers.setTimeout, writable: true, configurable: true });
        Object.defineProperty(this, "clearTimeout", { value: timers.clearTimeout, writable: true, configurable: true });
      } else {
        Object.defineProperty(this, name, { value: fn, writable: true, configurable: true });
      }
    },
  });
  Object.defineProperty(sys, "setTimeout", accessor("setTimeout", setDescriptor));
  Object.defineProperty(sys, "clearTimeout", accessor("clearTimeout", clearDescriptor));
  return true;
}

/** Many timers over one slot that tslab fires (`innerSet`) or empties (`innerClear`). */
function multiplex(innerSet, innerClear) {
  const pending = []; // { handle, run } in the order TypeScript asked for them
  let slot = null; // tslab's pending timer, while it holds one for us
  let firing = false;

  function fire() {
    firing = true;
    try {
      // Timers set while these run (an invalidation scheduling a rebuild) run in this same pass:
      // tslab fires its slot once per compile.
      while (pending.length) pending.shift().run();
    } finally {
      firing = false;
      slot = null; // tslab empties its slot when this returns
    }
  }

  return {
    setTimeout(callback, _ms, ...args) {
      const handle = { multiplexed: true };
      pending.push({ handle, run: () => callback(...args) });
      if (!slot && !firing) slot = innerSet(fire);
      return handle;
    },
    clearTimeout(handle) {
      const index = pending.findIndex((p) => p.handle === handle);
      if (index >= 0) pending.splice(index, 1);
      if (!pending.length && slot && !firing) {
        innerClear(slot);
        slot = null;
      }
    },
  };
}

module.exports = { installCompileTimers };
