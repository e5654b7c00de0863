# hcq_embed_sources(OUT_VAR WHAT FILE:NAME...): for each FILE of the calling folder, a generated C file
# defining `const char NAME[]` with FILE's bytes (embed.cmake, next to this file), rebuilt when FILE
# changes; the generated files' paths go to OUT_VAR. The models compile their kernel sources at run
# time from these strings, so an installed hcq needs no kernel files.
set(HCQ_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed.cmake)
function(hcq_embed_sources out what)
  set(sources)
  foreach(pair ${ARGN})
    string(REPLACE ":" ";" pair "${pair}")
    list(GET pair 0 file)
    list(GET pair 1 name)
    set(generated ${CMAKE_CURRENT_BINARY_DIR}/${name}.c)
    add_custom_command(
      OUTPUT ${generated}
      COMMAND ${CMAKE_COMMAND} -DINPUT=${CMAKE_CURRENT_SOURCE_DIR}/${file} -DOUTPUT=${generated} -DNAME=${name}
              -P ${HCQ_EMBED_SCRIPT}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${file} ${HCQ_EMBED_SCRIPT}
      COMMENT "Embedding the ${what} (${file})")
    list(APPEND sources ${generated})
  endforeach()
  set(${out} ${sources} PARENT_SCOPE)
endfunction()
