# Warning and sanitizer flags, applied to every gpuckpt target through gpuckpt_options.
add_library(gpuckpt_options INTERFACE)
target_compile_options(gpuckpt_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
  $<$<BOOL:${GPUCKPT_WERROR}>:-Werror>)
target_include_directories(gpuckpt_options INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
if(GPUCKPT_SANITIZE)
  target_compile_options(gpuckpt_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                   -fno-sanitize-recover=undefined)
  target_link_options(gpuckpt_options INTERFACE -fsanitize=address,undefined)
endif()
