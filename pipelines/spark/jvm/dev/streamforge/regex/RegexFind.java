package dev.streamforge.regex;

import org.apache.spark.sql.api.java.UDF2;

/**
 * {@code streamforge_regex_find(text, pattern)}: does {@code pattern} match anywhere in {@code text}
 * (an unanchored search, DSL {@code REGEX:} and {@code KEY_MATCHES:})? NULL when either argument is
 * NULL. Time linear in the text (RE2/J).
 */
public final class RegexFind implements UDF2<String, String, Boolean> {
  private static final long serialVersionUID = 1L;

  @Override
  public Boolean call(String text, String regex) {
    if (text == null || regex == null) {
      return null;
    }
    return Patterns.compiled(regex).matcher(text).find();
  }
}
