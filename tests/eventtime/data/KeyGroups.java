import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
public class KeyGroups {
  public static void main(String[] a) {
    StringBuilder sb = new StringBuilder();
    int[] ints = {0, 1, 2, 3, 42, -1, -7, 1000, 123456789, Integer.MAX_VALUE, Integer.MIN_VALUE};
    for (int i : ints) sb.append("int ").append(i).append(" ").append(KeyGroupRangeAssignment.assignToKeyGroup(i, 128)).append(" ").append(KeyGroupRangeAssignment.assignToKeyGroup(i, 4096)).append("\n");
    long[] longs = {5000000000L, -5000000000L, Long.MAX_VALUE, Long.MIN_VALUE};
    for (long l : longs) sb.append("long ").append(l).append(" ").append(KeyGroupRangeAssignment.assignToKeyGroup(l, 128)).append(" ").append(KeyGroupRangeAssignment.assignToKeyGroup(l, 4096)).append("\n");
    for (int p : new int[]{1, 2, 3, 7, 100, 200, 1000, 30000}) sb.append("maxp ").append(p).append(" ").append(KeyGroupRangeAssignment.computeDefaultMaxParallelism(p)).append("\n");
    for (int p : new int[]{1, 2, 3, 5}) for (int i = 0; i < p; i++) sb.append("range ").append(p).append(" ").append(i).append(" ").append(KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(128, p, i)).append("\n");
    System.out.print(sb);
  }
}
