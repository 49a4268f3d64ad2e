/**
 * Plain-text stand-ins for the agent's TUI components (`@mariozechner/pi-tui`,
 * `@oh-my-pi/pi-tui`), so that a tool's renderCall / renderResult written for
 * the original runs unchanged and gives the host a string.
 *
 * Rules:
 * 1. Every component has `render(width): string[]`, as the original's do; the
 *    lines carry no ANSI styling of their own (a theme's colours are the
 *    caller's, and the plain theme adds none).
 * 2. `renderedText(value)` turns what a hook returned into the string the host
 *    wants: a string as is, a component rendered at RENDER_WIDTH and joined with
 *    newlines. Anything else is left for the caller to refuse.
 * 3. Widths count code points after stripping ANSI escapes; East Asian wide
 *    characters are not measured as two columns (the host shows plain text, not a
 *    terminal grid).
 */

export const RENDER_WIDTH = 100;

const ANSI = /\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g;

/** Columns a string takes once its ANSI escapes are removed. */
export function visibleWidth(text: string): number {
  return [...String(text).replace(ANSI, "")].length;
}

/** At most `width` visible columns, ending in `ellipsis` when cut. */
export function truncateToWidth(text: string, width: number, ellipsis = "..."): string {
  const plain = [...String(text).replace(ANSI, "")];
  if (plain.length <= width) return String(text);
  const room = Math.max(0, width - [...ellipsis].length);
  return plain.slice(0, room).join("") + ellipsis.slice(0, Math.max(0, width));
}

/** Lines of at most `width` columns, broken at spaces where possible. */
export function wrapTextWithAnsi(text: string, width: number): string[] {
  const out: string[] = [];
  const w = Math.max(1, Math.floor(width));
  for (const raw of String(text).replace(ANSI, "").split("\n")) {
    let line = "";
    for (const word of raw.split(" ")) {
      let rest = word;
      while ([...rest].length > w) {
        if (line) {
          out.push(line);
          line = "";
        }
        out.push([...rest].slice(0, w).join(""));
        rest = [...rest].slice(w).join("");
      }
      const candidate = line ? `${line} ${rest}` : rest;
      if ([...candidate].length > w) {
        out.push(line);
        line = rest;
      } else {
        line = candidate;
      }
    }
    out.push(line);
  }
  return out;
}

export interface Component {
  render(width: number): string[];
  invalidate?(): void;
}

function padded(lines: string[], paddingX: number, paddingY: number): string[] {
  const pad = " ".repeat(Math.max(0, paddingX));
  const body = lines.map((l) => (l ? pad + l : l));
  const blank = Array.from({ length: Math.max(0, paddingY) }, () => "");
  return [...blank, ...body, ...blank];
}

export class Text implements Component {
  constructor(
    private text = "",
    private paddingX = 1,
    private paddingY = 1,
    _customBgFn?: unknown,
  ) {}
  setText(text: string): void {
    this.text = text;
  }
  setCustomBgFn(_fn?: unknown): void {}
  invalidate(): void {}
  render(width: number): string[] {
    if (!this.text || !this.text.trim()) return [];
    const inner = Math.max(1, width - 2 * this.paddingX);
    return padded(wrapTextWithAnsi(this.text, inner), this.paddingX, this.paddingY);
  }
}

export class TruncatedText implements Component {
  constructor(
    private text = "",
    private paddingX = 0,
    private paddingY = 0,
  ) {}
  invalidate(): void {}
  render(width: number): string[] {
    const first = this.text.split("\n")[0] ?? "";
    return padded([truncateToWidth(first, Math.max(1, width - 2 * this.paddingX))], this.paddingX, this.paddingY);
  }
}

export class Spacer implements Component {
  constructor(private lines = 1) {}
  setLines(lines: number): void {
    this.lines = lines;
  }
  invalidate(): void {}
  render(_width: number): string[] {
    return Array.from({ length: Math.max(0, this.lines) }, () => "");
  }
}

export class Container implements Component {
  children: Component[] = [];
  addChild(child: Component): void {
    this.children.push(child);
  }
  removeChild(child: Component): void {
    const at = this.children.indexOf(child);
    if (at >= 0) this.children.splice(at, 1);
  }
  clear(): void {
    this.children = [];
  }
  invalidate(): void {
    for (const child of this.children) child.invalidate?.();
  }
  render(width: number): string[] {
    return this.children.flatMap((child) => child.render(width));
  }
}

export class Box extends Container {
  constructor(
    private paddingX = 1,
    private paddingY = 1,
    _bgFn?: unknown,
  ) {
    super();
  }
  setBgFn(_fn?: unknown): void {}
  override render(width: number): string[] {
    const inner = Math.max(1, width - 2 * this.paddingX);
    const lines = super.render(inner);
    return lines.length ? padded(lines, this.paddingX, this.paddingY) : [];
  }
}

/** Markdown shown as its source text (the host's client renders or shows it). */
export class Markdown implements Component {
  constructor(
    private text = "",
    private paddingX = 1,
    private paddingY = 1,
    _theme?: unknown,
    _defaultStyle?: unknown,
  ) {}
  setText(text: string): void {
    this.text = text;
  }
  invalidate(): void {}
  render(width: number): string[] {
    if (!this.text || !this.text.trim()) return [];
    const inner = Math.max(1, width - 2 * this.paddingX);
    const lines = this.text.split("\n").flatMap((line) => (/^\s*(```|\|)/.test(line) ? [line] : wrapTextWithAnsi(line, inner)));
    return padded(lines, this.paddingX, this.paddingY);
  }
}

/** A hook's result as the host's string (rule 2); anything else is returned unchanged. */
export function renderedText(value: unknown): unknown {
  if (value !== null && typeof value === "object" && typeof (value as Component).render === "function") {
    const lines = (value as Component).render(RENDER_WIDTH);
    if (Array.isArray(lines)) return lines.map((line) => String(line).trimEnd()).join("\n");
  }
  return value;
}

export const TUI_EXPORTS: Record<string, unknown> = {
  Text,
  TruncatedText,
  Spacer,
  Container,
  Box,
  Markdown,
  visibleWidth,
  truncateToWidth,
  wrapTextWithAnsi,
};
