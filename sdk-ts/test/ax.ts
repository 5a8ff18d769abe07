/**
 * Test helper: a real AX deployment — a nats-server (built from the
 * repository's go.mod version) on a random port with its store in a temp
 * dir, `ax topology` and an `ax orchestrator`. Binaries come from
 * NATS_SERVER_BIN and AX_BIN when set, else `go build` in the repository
 * (into a per-user directory under the temp dir, relinked only when stale).
 */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(fileURLToPath(new URL(".", import.meta.url)), "../../..");

function build(dir: string, out: string, pkg: string): string {
  const bin = join(dir, out);
  execFileSync("go", ["build", "-o", bin, pkg], { cwd: repo, stdio: ["ignore", "ignore", "inherit"] });
  return bin;
}

/** A running deployment; stop() ends it and removes its files. */
export interface AX {
  url: string;
  stop(): Promise<void>;
  /** The orchestrator's log so far. */
  log(): string;
  /** Kills the orchestrator with SIGKILL and waits until it is gone. */
  killOrchestrator(): Promise<void>;
  /** Starts the orchestrator again (after killOrchestrator). */
  startOrchestrator(): void;
}

async function exited(p: ChildProcess, ms: number): Promise<boolean> {
  if (p.exitCode !== null || p.signalCode !== null) return true;
  return new Promise((r) => {
    const t = setTimeout(() => r(false), ms);
    p.once("exit", () => {
      clearTimeout(t);
      r(true);
    });
  });
}

export async function startAX(): Promise<AX> {
  const dir = mkdtempSync(join(tmpdir(), "ax-sdk-ts-"));
  // A stable directory: go build skips the link of a binary that is up to date.
  const binDir = join(tmpdir(), `ax-sdk-ts-bin-${process.getuid?.() ?? 0}`);
  mkdirSync(binDir, { recursive: true });
  const natsBin = process.env.NATS_SERVER_BIN || build(binDir, "nats-server", "github.com/nats-io/nats-server/v2");
  const axBin = process.env.AX_BIN || build(binDir, "ax", "./cmd/ax");
  const srv = spawn(natsBin, ["-js", "-a", "127.0.0.1", "-p", "-1", "-sd", join(dir, "js"), "--ports_file_dir", dir], {
    stdio: "ignore",
  });
  let url = "";
  for (let i = 0; i < 500 && !url; i++) {
    const f = readdirSync(dir).find((n) => n.endsWith(`_${srv.pid}.ports`));
    if (f) {
      try {
        url = (JSON.parse(readFileSync(join(dir, f), "utf8")) as { nats: string[] }).nats[0] ?? "";
      } catch {
        // written in part: read again
      }
    }
    if (!url) await new Promise((r) => setTimeout(r, 20));
  }
  if (!url) throw new Error("nats-server wrote no ports file");
  execFileSync(axBin, ["topology", "--nats", url], { stdio: "ignore" });
  let orchLog = "";
  const startOrch = () => {
    const p = spawn(
      axBin,
      ["orchestrator", "--nats", url, "--node-id", "sdk-ts-test", "--log-level", "warn", "--retry-base", "100ms", "--retry-max", "300ms"],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    p.stderr?.on("data", (b: Buffer) => (orchLog += b.toString()));
    return p;
  };
  let orch = startOrch();
  return {
    url,
    log: () => orchLog,
    killOrchestrator: async () => {
      orch.kill("SIGKILL");
      if (!(await exited(orch, 10_000))) throw new Error("the orchestrator did not die after SIGKILL");
    },
    startOrchestrator: () => {
      orch = startOrch();
    },
    stop: async () => {
      for (const p of [orch, srv]) {
        p.kill("SIGTERM");
        if (!(await exited(p, 10_000))) p.kill("SIGKILL");
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
