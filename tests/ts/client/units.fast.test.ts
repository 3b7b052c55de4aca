// Pure parts of the client, without a server: judge replies, retry, gathering limits.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { GatherError, gatherTrajectories, gatherTrajectoryGroups, retry, Trajectory, TrajectoryGroup } from "../../../lib/index";
import { parseJudgeReply } from "../../../lib/integrations/ruler";

describe("parseJudgeReply", () => {
  it("finds the JSON inside prose or code fences and validates it", () => {
    const reply = 'Sure!\n```json\n{"scores": [{"trajectory_id": 1, "explanation": "good", "score": 0.8}]}\n```';
    assert.deepEqual(parseJudgeReply(reply).scores, [{ trajectory_id: "1", explanation: "good", score: 0.8 }]);
    assert.throws(() => parseJudgeReply("no json here"), /no JSON object/);
    assert.throws(() => parseJudgeReply('{"scores": [{"trajectory_id": "1", "score": 3}]}'));
  });
});

describe("retry", () => {
  it("retries with backoff until success, and stops on errors it should not retry", async () => {
    let calls = 0;
    assert.equal(await retry(async () => (++calls < 3 ? Promise.reject(new Error("flaky")) : "ok"), { delay: 1 }), "ok");
    assert.equal(calls, 3);
    calls = 0;
    await assert.rejects(retry(async () => { calls++; throw new TypeError("fatal"); }, { delay: 1, on: (e) => !(e instanceof TypeError) }), TypeError);
    assert.equal(calls, 1);
  });
});

describe("gatherTrajectoryGroups", () => {
  const ok = (reward: number) => async () => new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }], reward });
  const boom = async (): Promise<Trajectory> => {
    throw new Error("rollout broke");
  };

  it("respects the concurrency limit and calls afterEach once per group", async () => {
    let running = 0;
    let peak = 0;
    const slow = () => async () => {
      running++;
      peak = Math.max(peak, running);
      await new Promise((r) => setTimeout(r, 5));
      running--;
      return new Trajectory({ messagesAndChoices: [{ role: "user", content: "x" }], reward: 1 });
    };
    const seen: number[] = [];
    const groups = [0, 1, 2].map(() => new TrajectoryGroup(Array.from({ length: 6 }, slow)));
    await gatherTrajectoryGroups(groups, { concurrency: 4, progress: false, afterEach: (g) => void seen.push(g.trajectories.length) });
    assert.equal(peak, 4);
    assert.deepEqual(seen, [6, 6, 6]);
  });

  it("collects exceptions up to the limit (a count or a fraction) and then fails with the first", async () => {
    const [group] = await gatherTrajectoryGroups([new TrajectoryGroup([ok(1), boom, ok(0)])], { maxExceptions: 1, progress: false });
    assert.equal(group!.trajectories.length, 2);
    assert.equal(group!.exceptions.length, 1);
    await assert.rejects(gatherTrajectories([ok(1), boom, boom, ok(0)], { maxExceptions: 0.25, progress: false }), (error: unknown) => {
      assert.ok(error instanceof GatherError);
      assert.match(error.message, /rollouts threw .*the first: rollout broke/s);
      return true;
    });
  });
});
