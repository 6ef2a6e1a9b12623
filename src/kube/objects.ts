/** The parts of Kubernetes objects SPACE reads, typed loosely (the apiserver may send more). */
export interface PodObject {
  metadata?: { name?: string; uid?: string; resourceVersion?: string; deletionTimestamp?: string | Date; annotations?: Record<string, string> };
  spec?: { nodeName?: string };
  status?: {
    phase?: string;
    podIP?: string;
    reason?: string;
    message?: string;
    conditions?: Array<{ type: string; status: string; reason?: string; message?: string }>;
  };
}
export interface EventObject {
  metadata?: { name?: string };
  involvedObject?: { uid?: string; name?: string };
  reason?: string;
  message?: string;
  count?: number;
}
