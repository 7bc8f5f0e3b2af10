// Types of `tokenrelay/lanes` (lanes.js).

export type Row = 'step' | 'send' | 'arrive' | 'parse' | 'render' | 'paint';
export declare const ROWS: readonly Row[];
export declare const ROW_NAMES: Readonly<Record<Row, string>>;
export declare const LANES: readonly (readonly [lane: string, from: Row, to: Row])[];

/** One streamed chunk and the time it reached each row (ms on the page's clock), or null. */
export interface LaneEvent {
  id: number;
  step: number | null;
  stepStart: number | null;
  source: string | null;
  tokens: number;
  send: number | null;
  arrive: number | null;
  parse: number | null;
  render: number | null;
  paint: number | null;
}

export interface LaneStat {
  max_ms: number;
  p90_ms: number | null;
  total_ms: number;
}

export interface LanesResult {
  events: LaneEvent[];
  lanes: Partial<Record<string, LaneStat>>;
  stepNote?: string;
}

/** The hop times of one delta: network arrival (or null), parse, and the chunk's server timing. */
export interface Hop {
  arrive: number | null;
  parse: number;
  timing: object | null;
}

export declare function alignSends(events: Partial<LaneEvent>[]): number | null;
export declare function chatEvents(
  records: {
    arrive: number | null;
    parse: number;
    render?: number | null;
    paint?: number | null;
    timing: any;
  }[],
): LaneEvent[];
export declare function laneStats(events: LaneEvent[]): Partial<Record<string, LaneStat>>;
export declare function stepStats(events: LaneEvent[]): { max_ms: number; p90_ms: number | null } | null;
export declare function heldText(lanes: Partial<Record<string, LaneStat>>): string;
/** The lanes as an SVG element, made with `doc`. */
export declare function drawLanes(result: LanesResult, doc?: Document): SVGSVGElement;

/** Records a reply's hops: handed(hop) when text goes to the renderer, painted() in the frame that drew it. */
export declare class RelayRecorder {
  constructor(now: () => number);
  readonly records: (Hop & { render: number; paint: number | null })[];
  readonly waiting: boolean;
  handed(hop: Hop): void;
  painted(): void;
  result(): LanesResult;
}
