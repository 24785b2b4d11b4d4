package dev.streamforge.regex;

import com.google.re2j.Pattern;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The compiled RE2/J patterns of one executor JVM. A plan holds a handful of literal patterns, so the cache
 * is small and simply emptied when it is full (a compiled {@link Pattern} is immutable and thread-safe).
 */
final class Patterns {
  private static final int MAX_PATTERNS = 256;
  private static final ConcurrentHashMap<String, Pattern> CACHE = new ConcurrentHashMap<>();

  private Patterns() {}

  /**
   * The pattern compiled by RE2/J with its default flags (the syntax the DSL parser accepted with RE2).
   *
   * @throws com.google.re2j.PatternSyntaxException for a pattern outside RE2/J's syntax (the parser
   *     refuses those before a plan is built)
   */
  static Pattern compiled(String regex) {
    Pattern pattern = CACHE.get(regex);
    if (pattern == null) {
      pattern = Pattern.compile(regex);
      if (CACHE.size() >= MAX_PATTERNS) {
        CACHE.clear();
      }
      CACHE.put(regex, pattern);
    }
    return pattern;
  }
}
